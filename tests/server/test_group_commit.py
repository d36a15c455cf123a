"""Concurrent ACS traffic over real HTTP: group commit must never fork a chain, lose an
acknowledged entry, or let a replay through; and a kill -9 must not lose an answered step."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TEST_IKM, Server, agent_client, start_server

from warden.ledger.verify import verify_records
from warden.store import open_store
from warden.wire.acs.client import AcsClient


def _client(server: Server, http: httpx.Client, **kw: Any) -> AcsClient:
    def send(body: bytes) -> dict[str, Any]:
        r = http.post(server.acs_url, content=body, headers={"content-type": "application/json"})
        parsed: dict[str, Any] = r.json()
        return parsed

    return agent_client(send, server.database_url, **kw)


def _verify_db(data_dir: Path) -> Any:
    store = open_store(f"sqlite:///{data_dir / 'warden.db'}", migrate=False)
    try:
        return verify_records(store.iter_records(), ikm=TEST_IKM)
    finally:
        store.close()


def test_concurrent_sessions_and_a_shared_session(server: Server) -> None:
    """8 threads, 40 decisions each: 6 own sessions, 2 share one (racing on its head)."""
    answered: dict[str, list[str]] = {}
    lock = threading.Lock()
    errors: list[str] = []
    with httpx.Client(timeout=30) as http:
        shared = _client(server, http, track_chain=False)
        shared.hello()
        shared.call("steps/sessionStart", {})
    shared_sid = shared.session_id

    def worker(n: int) -> None:
        with httpx.Client(timeout=30) as http:
            if n < 2:
                c = _client(server, http, session_id=shared_sid, track_chain=False)
            else:
                c = _client(server, http, track_chain=False)
                c.hello()
                c.call("steps/sessionStart", {})
            for i in range(40):
                r = c.tool_call("read_file", {"path": f"/w{n}/{i}"})
                res = r.get("result", {})
                if res.get("decision") != "allow" or "chain_hash" not in res:
                    errors.append(json.dumps(r)[:300])
                    continue
                with lock:
                    answered.setdefault(c.session_id, []).append(res["chain_hash"])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(len(v) for v in answered.values()) == 8 * 40
    server.stop()
    report = _verify_db(server.data_dir)
    assert report.sessions == 8  # 7 sessions and the agent's registration chain
    # Every hash a client was given is an entry of its session's chain: none was lost.
    con = sqlite3.connect(server.data_dir / "warden.db")
    stored = {(sid, h) for sid, h in con.execute("SELECT session_id, entry_hash FROM entries")}
    con.close()
    for sid, hashes in answered.items():
        assert len(set(hashes)) == len(hashes)  # no two answers share a chain position
        assert all((sid, h) in stored for h in hashes)
    assert len(answered[shared_sid]) == 80


def test_concurrent_replays_of_one_request_admit_exactly_one(server: Server) -> None:
    with httpx.Client(timeout=30) as http:
        c = _client(server, http, track_chain=False)
        c.hello()
        c.call("steps/sessionStart", {})
        body = json.dumps(
            c.envelope(
                "steps/toolCallRequest",
                {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "/x"}}},
            )
        ).encode()
    results: list[dict[str, Any]] = []

    def send() -> None:
        with httpx.Client(timeout=30) as http:
            results.append(http.post(server.acs_url, content=body).json())

    threads = [threading.Thread(target=send) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decided = [r for r in results if "result" in r]
    replays = [r for r in results if r.get("error", {}).get("code") == -32005]
    assert len(decided) == 1 and len(replays) == 9, results
    server.stop()
    # sessionStart, the one decision and the agent's registration entry
    assert _verify_db(server.data_dir).entries == 3


@pytest.mark.parametrize("sync", ["FULL", "NORMAL"])
def test_kill_9_loses_no_answered_step(tmp_path: Path, sync: str) -> None:
    """Answers received before a SIGKILL all have their entries after restart."""
    srv = start_server(
        tmp_path / "srv",
        Path(__file__).parents[2] / "examples" / "policies" / "default.yaml",
        "--sqlite-sync",
        sync,
    )
    answered: list[tuple[str, str]] = []
    stop = threading.Event()

    def worker() -> None:
        with httpx.Client(timeout=10) as http:
            c = _client(srv, http, track_chain=False)
            try:
                c.hello()
                c.call("steps/sessionStart", {})
                while not stop.is_set():
                    r = c.tool_call("read_file", {"path": f"/{uuid.uuid4()}"})
                    if "chain_hash" in r.get("result", {}):
                        answered.append((c.session_id, r["result"]["chain_hash"]))
            except (httpx.TransportError, json.JSONDecodeError):
                return  # the server died mid-request: that answer was never received

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    while len(answered) < 200:
        threading.Event().wait(0.01)
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    stop.set()
    for t in threads:
        t.join()
    got = list(answered)
    assert len(got) >= 200
    restarted = start_server(tmp_path / "srv")
    restarted.stop()
    report = _verify_db(tmp_path / "srv")
    con = sqlite3.connect(tmp_path / "srv" / "warden.db")
    stored = set(con.execute("SELECT session_id, entry_hash FROM entries"))
    con.close()
    missing = [a for a in got if a not in stored]
    assert missing == []
    assert report.entries >= len(got)
