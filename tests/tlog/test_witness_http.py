"""The log over real HTTP with a real `warden serve`: proofs and refusals of
``/v1/log/*``, a witness cosigning until the quorum makes a checkpoint final, and the
witness refusing (exit 1, loud) a fork made by restoring an old copy of the database."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import Server, start_server
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import create_engine, text

from warden.tlog.merkle import verify_inclusion
from warden.tlog.note import COSIGNATURE_V1, NoteSigner, NoteVerifier, open_checkpoint, parse_note
from warden.tlog.witness import ForkDetected, witness_once


def _leaves(srv: Server) -> int:
    engine = create_engine(srv.database_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT (SELECT COUNT(*) FROM entries) + (SELECT COUNT(*) FROM log_events)"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _checkpoint_at_least(srv: Server, size: int) -> str:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        r = httpx.get(srv.url + "/v1/log/checkpoint")
        if r.status_code == 200 and int(r.text.split("\n")[1]) >= size:
            return r.text
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint of size {size}")


def _activity(srv: Server, agent: str) -> None:
    c = srv.client(agent_id=agent)
    c.hello()
    c.call("steps/sessionStart", {})
    assert "result" in c.tool_call("read_file", {"path": "/tmp/x"})


@pytest.fixture
def witness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NoteSigner:
    signer = NoteSigner("witness.test/w1", Ed25519PrivateKey.generate(), COSIGNATURE_V1)
    keys = tmp_path / "witnesses.txt"
    keys.write_text(f"# the test witness\n{signer.vkey()}\n")
    monkeypatch.setenv("WARDEN_LOG_WITNESS_KEYS", str(keys))
    monkeypatch.setenv("WARDEN_LOG_WITNESS_QUORUM", "1")
    monkeypatch.setenv("WARDEN_LOG_CHECKPOINT_INTERVAL_S", "0.1")
    return signer


def test_proofs_refusals_and_a_final_checkpoint(tmp_path: Path, witness: NoteSigner) -> None:
    srv = start_server(tmp_path / "srv")
    try:
        _activity(srv, "agent-a")
        note = _checkpoint_at_least(srv, _leaves(srv))
        vkey = httpx.get(srv.url + "/v1/log/key").text.strip()
        log_key = NoteVerifier.from_vkey(vkey)
        cp = open_checkpoint(note, log_key)
        r = httpx.get(srv.url + "/v1/log/checkpoint")
        assert r.headers["warden-checkpoint-final"] == "false"
        assert httpx.get(srv.url + "/v1/log/checkpoint/final").status_code == 404
        doc = httpx.get(srv.url + f"/v1/log/inclusion?index=0&size={cp.size}").json()
        import base64

        proof = [base64.b64decode(p) for p in doc["proof"]]
        assert verify_inclusion(0, cp.size, base64.b64decode(doc["leaf_hash"]), proof, cp.root)
        for query, needle in (
            ("inclusion?index=abc&size=3", "non-negative decimal"),
            ("inclusion?index=1", "size"),
            (f"inclusion?index={cp.size}&size={cp.size}", "need 0 <= index < size"),
            ("inclusion?index=0&size=99999", "need 0 <= index < size"),
            ("consistency?from=3&to=2", "from <= to"),
            ("consistency?from=-1&to=2", "non-negative"),
        ):
            r = httpx.get(srv.url + "/v1/log/" + query)
            assert r.status_code == 400, (query, r.text)
            assert r.json()["blockedBy"] == "log:invalid_params"
            assert needle in r.json()["message"], (query, r.json())
        bad = httpx.post(srv.url + "/v1/log/cosignatures", content=b"not a note")
        assert bad.status_code == 400 and bad.json()["blockedBy"] == "log:cosignature_refused"
        # An impostor's cosignature is refused and changes nothing.
        impostor = NoteSigner("witness.test/w1", Ed25519PrivateKey.generate(), COSIGNATURE_V1)
        with httpx.Client() as client:
            with pytest.raises(Exception, match="refused"):
                witness_once(client, srv.url, log_key, impostor, tmp_path / "imp.json")
            result = witness_once(client, srv.url, log_key, witness, tmp_path / "w.json")
        assert result.cosigned
        r = httpx.get(srv.url + "/v1/log/checkpoint/final")
        assert r.status_code == 200
        final = parse_note(r.text)
        assert len(final.by(NoteVerifier.from_vkey(witness.vkey()))) == 1
    finally:
        srv.stop()


def test_witness_refuses_a_fork_from_a_restored_database(
    tmp_path: Path, witness: NoteSigner
) -> None:
    data = tmp_path / "srv"
    wkey = tmp_path / "witness.key"  # the configured witness's key, for the CLI
    wkey.write_bytes(
        witness.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    wkey.chmod(0o600)
    state = tmp_path / "witness-state.json"
    srv = start_server(data)
    _activity(srv, "agent-a")
    _checkpoint_at_least(srv, _leaves(srv))
    vkey = httpx.get(srv.url + "/v1/log/key").text.strip()

    def run_witness() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "warden", "witness", "--url", srv.url, "--log-key", vkey,
             "--key", str(wkey), "--name", "witness.test/w1", "--state", str(state), "--once",
             "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    assert run_witness().returncode == 0
    srv.stop()
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy(data / "warden.db", backup / "warden.db")
    srv = start_server(data)
    for agent in ("agent-b", "agent-c"):
        _activity(srv, agent)
    _checkpoint_at_least(srv, _leaves(srv))
    first = run_witness()
    assert first.returncode == 0, first.stderr
    srv.stop()
    for suffix in ("", "-wal", "-shm"):
        (data / f"warden.db{suffix}").unlink(missing_ok=True)
    shutil.copy(backup / "warden.db", data / "warden.db")
    srv = start_server(data)  # the old history, plus a new start: a different log
    try:
        for agent in ("agent-d", "agent-e", "agent-f", "agent-g"):
            _activity(srv, agent)
        _checkpoint_at_least(srv, _leaves(srv))
        before = state.read_text()
        forked = run_witness()
        assert forked.returncode == 1, (forked.stdout, forked.stderr)
        assert "ALARM" in forked.stderr
        assert "FORK" in forked.stderr or "ROLLBACK" in forked.stderr
        assert state.read_text() == before  # the witness remembers the good history
        with httpx.Client() as client, pytest.raises(ForkDetected):
            witness_once(client, srv.url, NoteVerifier.from_vkey(vkey), witness, state)
    finally:
        srv.stop()
