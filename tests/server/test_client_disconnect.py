"""A client that sends part of a body and goes away (decision 1202): a real ``warden
serve``, a raw socket that declares ``Content-Length: 100``, sends 7 bytes and closes.
Nobody is listening, so nothing is answered, nothing is logged above DEBUG (it was an
ERROR with a ``ClientDisconnect`` traceback on ``/v1``) and nothing is written."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import DEFAULT_POLICY, Server, start_server

#: Every route family that reads a request body, each a path that reads it.
PATHS = [
    "/v1/quotes",  # spend
    "/v1/action-requests",  # KLA
    "/v1/approvals/t-1/approve",  # approvals
    "/v1/agents",  # agents (admin)
    "/adcp/check_governance",  # AdCP REST
    "/mcp",  # AdCP MCP
    "/acs",
    "/desk/login",  # the approvals desk's form
    "/v1/log/cosignatures",  # the transparency log's witness endpoint
]


@pytest.fixture
def debug_server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "srv", DEFAULT_POLICY, "--log-level", "debug")
    yield srv
    srv.stop()


def _rows(data: Path) -> int:
    with sqlite3.connect(data / "warden.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return sum(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables)


def _send_part_and_close(url: str, path: str, token: str) -> bytes:
    """Declare 100 bytes, send 7, half-close; what the server wrote back before closing."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"a": 1')
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got


def test_a_client_that_goes_away_mid_body_is_not_a_server_error(debug_server: Server) -> None:
    server = debug_server
    token = (server.data_dir / "api.token").read_text().strip()
    before = _rows(server.data_dir)
    written = {path: _send_part_and_close(server.url, path, token) for path in PATHS}
    # The server is still serving, and has had time to log what it would.
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    time.sleep(0.5)
    log = server.log.read_text()
    assert "ERROR" not in log and "Traceback" not in log, log
    assert "ClientDisconnect" not in log, log
    # One DEBUG line for each route that had begun to read the body (the server logs at
    # DEBUG here so that the line is seen; /acs, /mcp and the desk stop reading silently).
    gone = [line for line in log.splitlines() if "the client went away" in line]
    assert all(" DEBUG warden.server.app: POST " in line for line in gone), gone
    assert len(gone) == 6, gone
    assert written == dict.fromkeys(PATHS, b""), written
    assert _rows(server.data_dir) == before
