"""An error's text is printed as it is, never read as Rich markup (decision 1181).

``warden approvals`` and ``warden replay agentdojo`` printed ``cannot reach Warden at
<url>: <exception>`` with the exception's text unescaped: a message holding ``[bold]`` lost
it, and one holding ``[/x]`` crashed the command with a ``MarkupError`` traceback. Here a
real loopback server answers with a header line holding markup, which httpx reports in
its exception ("illegal header line: bytearray(b'…')"), and a real refusal carries it in
its message."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_approvals import warden
from test_cli_replay import demo_key
from typer.testing import CliRunner

from warden.cli import app

MARKUP = "[/x] [bold]b[/bold] [red]r"


def _flat(text: str) -> str:
    """``text`` with Rich's line wrapping undone (it wraps at spaces)."""
    return " ".join(text.split())


def _serve(answer: bytes) -> Iterator[str]:
    """A loopback HTTP server that answers every request with ``answer``: its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(answer)
                except OSError:
                    pass

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        worker.join(5)


@pytest.fixture
def garbled() -> Iterator[str]:
    """A server whose answer has a header line httpx refuses, quoting it."""
    yield from _serve(b"HTTP/1.1 200 OK\r\n" + MARKUP.encode() + b"\r\n\r\n")


@pytest.fixture
def refusing() -> Iterator[str]:
    """A server that refuses every request in the /v1 envelope, with markup in its message."""
    body = json.dumps(
        {"blockedBy": "input:[bold]x", "message": f"no {MARKUP}", "retryable": False}
    ).encode()
    head = (
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    yield from _serve(head + body)


def test_approvals_prints_the_transport_error_as_it_is(garbled: str) -> None:
    out = warden("approvals", "list", "--url", garbled, env={"WARDEN_TOKEN": "wdn_x"})
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    expected = f"cannot reach Warden at {garbled}: illegal header line: bytearray(b'{MARKUP}')"
    assert expected in _flat(out.stderr), out.stderr


def test_approvals_prints_a_refusals_message_as_it_is(refusing: str) -> None:
    out = warden("approvals", "show", "t1", "--url", refusing, env={"WARDEN_TOKEN": "wdn_x"})
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert f"input:[bold]x (HTTP 400): no {MARKUP}" in _flat(out.stderr), out.stderr


def test_replay_prints_the_transport_error_as_it_is(tmp_path: Path, garbled: str) -> None:
    data = tmp_path / "data"
    demo_key(data)
    result = CliRunner().invoke(
        app,
        ["replay", "agentdojo", "--data-dir", str(data), "--url", garbled + "/acs", "--no-verify"],
    )
    assert result.exit_code == 2, (result.stderr, result.exception)
    expected = f"cannot reach Warden at {garbled}/acs: illegal header line: bytearray(b'{MARKUP}')"
    assert expected in _flat(result.stderr), result.stderr


def test_replay_prints_a_url_error_as_it_is(tmp_path: Path) -> None:
    data = tmp_path / "data"
    demo_key(data)
    result = CliRunner().invoke(
        app, ["replay", "agentdojo", "--data-dir", str(data), "--url", "http://a:[bold]/"]
    )
    assert result.exit_code == 2, (result.stderr, result.exception)
    assert "Invalid port: '[bold]'" in _flat(result.stderr), result.stderr
