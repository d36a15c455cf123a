"""Tampering with the SQLite database itself is caught by ``warden verify --data-dir``.

A live runtime writes two real sessions; the runtime is closed; the database is edited
behind Warden's back with the sqlite3 module; ``python -m warden verify --data-dir D`` must
exit 1 naming the reason, the session and the entry. Untouched, it exits 0. A database too
damaged to read exits 2 with a message, never a traceback.

Beyond the chain itself the database holds what an export does not show: the session
rows (signed at creation), the denormalized entry columns, the stored JSON text (parsed
strictly: SQL reads a duplicated key differently) and which entries have a session.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, TEST_IKM, service_client, write_key
from ledger_chains import produce_chain

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import SessionKeys
from warden.errors import IntegrityError, IntegrityReason
from warden.ledger.ledger import Ledger
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.settings import Settings
from warden.store import open_store
from warden.store.base import ReplayKeys, SessionState


@dataclass(frozen=True)
class DbTamper:
    name: str
    sql: Callable[[sqlite3.Connection, str, str], None]  # (db, session A, session B)
    reason: str
    where: str  # "A:2" → session A entry seq 2; "A" → session A, no entry
    message: str


def _edit_entry(db: sqlite3.Connection, a: str, _b: str) -> None:
    db.execute(
        "UPDATE entries SET entry = json_set(entry, '$.verdict.decision', "
        "CASE json_extract(entry, '$.verdict.decision') WHEN 'allow' THEN 'deny' ELSE 'allow' END)"
        " WHERE session_id = ? AND seq = 2",
        (a,),
    )


def _edit_response(db: sqlite3.Connection, a: str, _b: str) -> None:
    db.execute(
        "UPDATE entries SET response = json_set(response, '$.result.decision', "
        "CASE json_extract(response, '$.result.decision') WHEN 'allow' THEN 'deny' ELSE 'allow' "
        "END) WHERE session_id = ? AND seq = 3",
        (a,),
    )


def _delete_entry(db: sqlite3.Connection, _a: str, b: str) -> None:
    db.execute("DELETE FROM entries WHERE session_id = ? AND seq = 1", (b,))


def _rewind_head(db: sqlite3.Connection, a: str, _b: str) -> None:
    """Drop the last entry and move the session head back onto the new tail."""
    (last,) = db.execute("SELECT head_seq FROM sessions WHERE session_id = ?", (a,)).fetchone()
    db.execute("DELETE FROM entries WHERE session_id = ? AND seq = ?", (a, last))
    (tail_hash,) = db.execute(
        "SELECT entry_hash FROM entries WHERE session_id = ? AND seq = ?", (a, last - 1)
    ).fetchone()
    db.execute(
        "UPDATE sessions SET head_seq = ?, head_hash = ? WHERE session_id = ?",
        (last - 1, tail_hash, a),
    )


def _drop_last_entry(db: sqlite3.Connection, _a: str, b: str) -> None:
    db.execute(
        "DELETE FROM entries WHERE session_id = ? AND seq = "
        "(SELECT max(seq) FROM entries WHERE session_id = ?)",
        (b, b),
    )


def _swap_rows(db: sqlite3.Connection, a: str, _b: str) -> None:
    rows = dict(
        db.execute(
            "SELECT seq, entry FROM entries WHERE session_id = ? AND seq IN (1, 2)", (a,)
        ).fetchall()
    )
    for seq, other in ((1, 2), (2, 1)):
        db.execute(
            "UPDATE entries SET entry = ? WHERE session_id = ? AND seq = ?", (rows[other], a, seq)
        )


def _swap_whole_rows(db: sqlite3.Connection, a: str, _b: str) -> None:
    """Exchange everything rows seq 1 and 2 hold (columns consistent with their entries)."""
    cols = "entry_hash, step_id, step_type, entry, response, request"
    rows = {
        seq: db.execute(
            f"SELECT {cols} FROM entries WHERE session_id = ? AND seq = ?", (a, seq)
        ).fetchone()
        for seq in (1, 2)
    }
    # Move seq 1 aside first: (session_id, step_id) is unique.
    db.execute("UPDATE entries SET step_id = 'parked' WHERE session_id = ? AND seq = 1", (a,))
    for seq, other in ((2, 1), (1, 2)):
        db.execute(
            "UPDATE entries SET entry_hash = ?, step_id = ?, step_type = ?, entry = ?, "
            "response = ?, request = ? WHERE session_id = ? AND seq = ?",
            (*rows[other], a, seq),
        )


def _delete_session_row(which: int) -> Callable[[sqlite3.Connection, str, str], None]:
    def run(db: sqlite3.Connection, a: str, b: str) -> None:
        db.execute("DELETE FROM sessions WHERE session_id = ?", ((a, b)[which],))

    return run


def _sql_on_a(sql: str, *args: Any) -> Callable[[sqlite3.Connection, str, str], None]:
    """``sql`` whose last parameter is session A's id (after ``args``)."""

    def run(db: sqlite3.Connection, a: str, _b: str) -> None:
        db.execute(sql, (*args, a))

    return run


def _smuggle_verdict(db: sqlite3.Connection, a: str, _b: str) -> None:
    """A second ``verdict`` key in front of the real one in A seq 3's stored entry: SQL's
    json_extract now reads allow while a lenient json.loads still reads the original."""
    db.execute(
        "UPDATE entries SET entry = replace(entry, '\"verdict\":', "
        '\'"verdict":{"decision":"allow"},"verdict":\') '
        "WHERE session_id = ? AND seq = 3",
        (a,),
    )
    (decision,) = db.execute(
        "SELECT json_extract(entry, '$.verdict.decision') FROM entries "
        "WHERE session_id = ? AND seq = 3",
        (a,),
    ).fetchone()
    assert decision == "allow"


def _entry_hash_of_seq_1(db: sqlite3.Connection, a: str, _b: str) -> None:
    db.execute(
        "UPDATE entries SET entry_hash = (SELECT entry_hash FROM entries WHERE session_id = ?1 "
        "AND seq = 1) WHERE session_id = ?1 AND seq = 2",
        (a,),
    )


def _signature_of_b(db: sqlite3.Connection, a: str, b: str) -> None:
    db.execute(
        "UPDATE sessions SET session_signature = (SELECT session_signature FROM sessions "
        "WHERE session_id = ?) WHERE session_id = ?",
        (b, a),
    )


RH, CM, SI = "record_hash_mismatch", "chain_mismatch", "signature_invalid"

CASES = (
    DbTamper("db_entry_edited", _edit_entry, RH, "A:2", "≠ recomputed"),
    DbTamper("db_response_edited", _edit_response, SI, "A:3", "does not verify"),
    DbTamper("db_entry_deleted", _delete_entry, CM, "B:2", "expected seq 1"),
    # Only the entry text moves: its row's entry_hash column no longer matches it.
    DbTamper("db_entries_swapped", _swap_rows, RH, "A:1", "the entry_hash column"),
    DbTamper("db_rows_swapped", _swap_whole_rows, CM, "A:1", "does not link"),
    DbTamper("db_head_rewound", _rewind_head, SI, "A", "head signature does not verify"),
    DbTamper("db_tail_dropped", _drop_last_entry, CM, "B", "signed head (seq 2,"),
    # entries left without a session row
    DbTamper(
        "db_session_row_deleted",
        _delete_session_row(0),
        CM,
        "A",
        "6 audit entries belong to no session record",
    ),
    DbTamper(
        "db_last_session_row_deleted",
        _delete_session_row(1),
        CM,
        "B",
        "3 audit entries belong to no session record",
    ),
    # stored JSON that SQL and Python would read differently, or not at all
    DbTamper(
        "db_entry_duplicate_key",
        _smuggle_verdict,
        RH,
        "A:3",
        "the entry column is not strict JSON (duplicate object key 'verdict')",
    ),
    DbTamper(
        "db_response_duplicate_key",
        _sql_on_a(
            "UPDATE entries SET response = replace(response, '\"decision\":', "
            '\'"decision":"allow","decision":\') WHERE seq = 3 AND session_id = ?'
        ),
        RH,
        "A:3",
        "the response column is not strict JSON (duplicate object key 'decision')",
    ),
    DbTamper(
        "db_head_signature_not_json",
        _sql_on_a("UPDATE sessions SET head_signature = 'forged' WHERE session_id = ?"),
        RH,
        "A",
        "the head_signature column is not strict JSON",
    ),
    DbTamper(
        "db_negotiated_duplicate_key",
        _sql_on_a(
            "UPDATE sessions SET negotiated = replace(negotiated, '{\"server_hello\":', "
            '\'{"server_hello":{},"server_hello":\') WHERE session_id = ?'
        ),
        RH,
        "A",
        "the negotiated column is not strict JSON (duplicate object key 'server_hello')",
    ),
    # the denormalized entry columns
    DbTamper("db_entry_hash_column", _entry_hash_of_seq_1, RH, "A:2", "the entry_hash column"),
    DbTamper(
        "db_step_type_column",
        _sql_on_a(
            "UPDATE entries SET step_type = 'steps/sessionStart' WHERE seq = 3 AND session_id = ?"
        ),
        RH,
        "A:3",
        "the step_type column ('steps/sessionStart') differs from the entry's",
    ),
    DbTamper(
        "db_step_id_column",
        _sql_on_a("UPDATE entries SET step_id = 'forged' WHERE seq = 3 AND session_id = ?"),
        RH,
        "A:3",
        "the step_id column ('forged') differs from the entry's",
    ),
    # the session row
    DbTamper(
        "db_session_agent_edited",
        _sql_on_a("UPDATE sessions SET agent_id = 'agent-b' WHERE session_id = ?"),
        SI,
        "A",
        "session record signature does not verify",
    ),
    DbTamper(
        "db_session_key_id_edited",
        _sql_on_a("UPDATE sessions SET key_id = 'another-key' WHERE session_id = ?"),
        SI,
        "A",
        "session record signature does not verify",
    ),
    DbTamper(
        "db_session_created_at_edited",
        _sql_on_a(
            "UPDATE sessions SET created_at = '2020-01-01T00:00:00+00:00' WHERE session_id = ?"
        ),
        SI,
        "A",
        "session record signature does not verify",
    ),
    DbTamper(
        "db_session_negotiated_edited",
        _sql_on_a(
            "UPDATE sessions SET negotiated = json_set(negotiated, "
            "'$.server_hello.methods_evaluated', json('[]')) WHERE session_id = ?"
        ),
        SI,
        "A",
        "session record signature does not verify",
    ),
    DbTamper(
        "db_session_signature_removed",
        _sql_on_a("UPDATE sessions SET session_signature = NULL WHERE session_id = ?"),
        SI,
        "A",
        "session record signature missing",
    ),
    DbTamper(
        "db_session_signature_of_b",
        _signature_of_b,
        SI,
        "A",
        "session record signature does not verify",
    ),
    DbTamper(
        "db_session_reopened",
        _sql_on_a("UPDATE sessions SET closed = 0 WHERE session_id = ?"),
        CM,
        "A",
        "the head says the session is open, but it ended (steps/sessionEnd at seq 5)",
    ),
)


def _verify_cli(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(data_dir), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def closed_db(runtime: Runtime) -> tuple[Path, str, str]:
    """(data dir, session A, session B) of a real database no process holds open."""
    sid_a, sid_b = produce_chain(runtime)
    runtime.close()
    return runtime.settings.data_dir, sid_a, sid_b


def _tamper(data_dir: Path, sql: Callable[[sqlite3.Connection], Any]) -> None:
    db = sqlite3.connect(data_dir / "warden.db")
    try:
        with db:
            sql(db)
    finally:
        db.close()


def test_untouched_database_verifies(closed_db: tuple[Path, str, str]) -> None:
    data_dir, sid_a, sid_b = closed_db
    proc = _verify_cli(data_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # The two agent sessions and the two agents' registration chains (one entry each).
    assert (doc["sessions"], doc["entries"], doc["signatures_checked"]) == (4, 11, 13)
    assert {sid_a, sid_b} <= set(doc["heads"]) and len(doc["heads"]) == 4
    store = open_store(f"sqlite:///{data_dir / 'warden.db'}", migrate=False)
    try:
        report = verify_records(store.iter_records(), ikm=TEST_IKM)
    finally:
        store.close()
    assert report.session_signatures_checked == 4  # every session row is signed


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tampered_database_refused(closed_db: tuple[Path, str, str], case: DbTamper) -> None:
    data_dir, sid_a, sid_b = closed_db
    db = sqlite3.connect(data_dir / "warden.db")
    try:
        with db:
            case.sql(db, sid_a, sid_b)
    finally:
        db.close()
    proc = _verify_cli(data_dir, "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    session, _, seq = case.where.partition(":")
    sid = sid_a if session == "A" else sid_b
    failure = json.loads(proc.stdout)["failure"]
    assert (failure["reason"], failure["session_id"], failure["seq"]) == (
        case.reason,
        sid,
        int(seq) if seq else None,
    )
    where = f"session {sid}" + (f" entry seq {seq}" if seq else "")
    assert failure["message"].startswith(f"{where}: ")
    assert case.message in failure["message"]


def test_verify_without_database_is_bad_input(tmp_path: Path) -> None:
    write_key(tmp_path / "ikm.key")
    proc = _verify_cli(tmp_path)
    assert proc.returncode == 2
    assert "no database at" in proc.stderr


def test_session_row_edits_pass_without_a_key(closed_db: tuple[Path, str, str]) -> None:
    """The limit of --no-signatures: who a session belongs to is only as good as its
    signature; the keyless walk (hashes, links, closed flag) still passes."""
    data_dir, sid_a, _ = closed_db
    _tamper(data_dir, lambda db: db.execute("UPDATE sessions SET agent_id = 'x'"))
    assert _verify_cli(data_dir, "--no-signatures").returncode == 0
    assert _verify_cli(data_dir).returncode == 1


# -- a reopened session, a deleted replay key: attacks through the running Guardian -------


def _restart(data_dir: Path) -> Runtime:
    return Runtime.start(
        Settings(data_dir=data_dir, policy=DEFAULT_POLICY, key_file=data_dir / "ikm.key")
    )


def test_a_reopened_session_used_again_is_refused(closed_db: tuple[Path, str, str]) -> None:
    """Reset ``closed`` and the Guardian chains a new step and signs a head that says
    open: the head is genuine now, but the chain shows an entry after sessionEnd."""
    data_dir, sid_a, _ = closed_db
    _tamper(data_dir, lambda db: db.execute("UPDATE sessions SET closed = 0"))
    rt = _restart(data_dir)
    try:
        a = service_client(rt, agent_id="agent-a", session_id=sid_a, track_chain=False)
        assert "result" in a.tool_call("read_file", {"path": "/etc/hosts"})
    finally:
        rt.close()
    proc = _verify_cli(data_dir)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert (
        f"FAILED chain_mismatch: session {sid_a} entry seq 6: entry after the session ended "
        "(steps/sessionEnd at seq 5)"
    ) in proc.stderr


def test_a_closed_flag_set_on_an_open_session_is_refused(
    closed_db: tuple[Path, str, str],
) -> None:
    """A session that did not end, marked closed: only the head's signature can tell."""
    data_dir, _, _ = closed_db
    rt = _restart(data_dir)
    try:
        c = service_client(rt, agent_id="agent-c")
        c.hello()
        assert "result" in c.call("steps/sessionStart", {})
    finally:
        rt.close()
    assert _verify_cli(data_dir).returncode == 0
    _tamper(
        data_dir,
        lambda db: db.execute(
            "UPDATE sessions SET closed = 1 WHERE session_id = ?", (c.session_id,)
        ),
    )
    proc = _verify_cli(data_dir)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"FAILED signature_invalid: session {c.session_id}: head signature does not verify" in (
        proc.stderr
    )
    assert _verify_cli(data_dir, "--no-signatures").returncode == 0


def test_a_request_replayed_after_its_replay_keys_were_deleted_is_refused(
    runtime: Runtime,
) -> None:
    """The unique (session_id, step_id) index answers -32005 when the replay_keys rows
    are gone, and nothing is chained twice."""
    a = service_client(runtime, agent_id="agent-a")
    a.hello()
    envelope = a.envelope("steps/sessionStart", {})
    assert "result" in a.send(envelope)
    entries = runtime.store.counts()["entries"]
    _tamper(runtime.settings.data_dir, lambda db: db.execute("DELETE FROM replay_keys"))
    replayed = a.send(envelope)
    assert replayed["error"]["code"] == -32005, replayed
    assert runtime.store.counts()["entries"] == entries


# -- the request as received (stored beside its entry) -----------------------------------


def _ledger_chain(data_dir: Path, steps: int = 3) -> str:
    """A session written through the Ledger with each step's request stored; returns
    its id. (Independent of how the ACS service calls the Ledger.)"""
    store = open_store(f"sqlite:///{data_dir / 'warden.db'}")
    try:
        ledger = Ledger(store, SessionKeys(TEST_IKM), "warden")
        sid = str(uuid.uuid4())
        state = ledger.create_session(
            SessionState(sid, "agent", "client", "2026-11-30T00:00:00+00:00", {}),
            ReplayKeys("hello"),
        )
        for i in range(steps):
            request = canonical_bytes({"request_id": f"r{i}", "payload": {"n": i}}).decode()
            content = {
                "entry_id": str(uuid.uuid4()),
                "session_id": sid,
                "step_id": f"r{i}",
                "step_type": "warden/test",
                "request_hash": hashlib.sha256(request.encode()).hexdigest(),
            }
            ledger.commit(
                ledger.stage(state, content, lambda _e: None, replay=None, request=request)
            )
            loaded = store.load_session(sid, fresh=True)
            assert loaded is not None
            state = loaded
        records = [r for r in store.iter_records(sid) if r["kind"] == "entry"]
        assert [r["request"] for r in records] == [
            f'{{"payload":{{"n":{i}}},"request_id":"r{i}"}}' for i in range(steps)
        ]
    finally:
        store.close()
    write_key(data_dir / "ikm.key")
    return sid


def test_stored_requests_verify_and_their_edits_are_refused(tmp_path: Path) -> None:
    sid = _ledger_chain(tmp_path)
    proc = _verify_cli(tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["sessions"], doc["entries"], doc["signatures_checked"]) == (1, 3, 1)
    _tamper(
        tmp_path,
        lambda db: db.execute(
            "UPDATE entries SET request = replace(request, '1', '7') WHERE seq = 1"
        ),
    )
    proc = _verify_cli(tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert (
        f"FAILED record_hash_mismatch: session {sid} entry seq 1: the stored request hashes to"
    ) in proc.stderr


def test_a_request_that_does_not_match_its_hash_is_not_staged(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'warden.db'}")
    try:
        ledger = Ledger(store, SessionKeys(TEST_IKM), "warden")
        state = ledger.create_session(
            SessionState("s", "agent", "client", "t", {}), ReplayKeys("hello")
        )
        content = {"step_id": "r", "request_hash": hashlib.sha256(b"{}").hexdigest()}
        with pytest.raises(ValueError, match="request_hash"):
            ledger.stage(state, content, lambda _e: None, replay=None, request='{"a":1}')
        ledger.stage(state, content, lambda _e: None, replay=None, request="{}")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("request_value", "entry_has_hash"),
    [("{}", False), (7, True), ("{ }", True)],
    ids=["entry_without_request_hash", "request_not_text", "request_not_what_was_hashed"],
)
def test_verify_checks_the_stored_request(request_value: Any, entry_has_hash: bool) -> None:
    from warden.ledger.chain import chain_entry

    content: dict[str, Any] = {"session_id": "s", "step_id": "r", "step_type": "warden/test"}
    if entry_has_hash:
        content["request_hash"] = hashlib.sha256(b"{}").hexdigest()
    records = [
        {"kind": "session", "session_id": "s", "agent_id": "a", "key_id": "k", "created_at": "t"},
        {
            "kind": "entry",
            "session_id": "s",
            "seq": 0,
            "entry": chain_entry(content, None),
            "request": request_value,
        },
    ]
    with pytest.raises(IntegrityError) as info:
        verify_records(records)
    assert info.value.integrity_reason is IntegrityReason.RECORD_HASH_MISMATCH
    assert (info.value.session_id, info.value.seq) == ("s", 0)


# -- a database too damaged to read --------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DROP TABLE entries", "cannot read the database (OperationalError: no such table"),
        ("DROP TABLE sessions", "cannot read the database (OperationalError: no such table"),
        ("DROP TABLE alembic_version", "is not a Warden database (no schema revision)"),
        ("UPDATE alembic_version SET version_num = '0001'", "schema is at revision 0001"),
        ("ALTER TABLE entries DROP COLUMN request", "cannot read the database"),
    ],
    ids=["entries_dropped", "sessions_dropped", "no_revision", "old_revision", "column_dropped"],
)
def test_damaged_database_is_bad_input_not_a_traceback(
    closed_db: tuple[Path, str, str], sql: str, message: str
) -> None:
    damaged = closed_db[0]
    _tamper(damaged, lambda db: db.execute(sql))
    proc = _verify_cli(damaged)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_file_that_is_not_a_database_is_bad_input(closed_db: tuple[Path, str, str]) -> None:
    damaged = closed_db[0]
    db = damaged / "warden.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(os.urandom(8192))
    proc = _verify_cli(damaged)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "is it damaged or not a Warden database?" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE entries SET entry = CAST(x'7bff7d' AS TEXT) WHERE seq = 1",
        "UPDATE entries SET entry = x'7b7d' WHERE seq = 1",
        "UPDATE sessions SET head_seq = 'five'",
        "UPDATE sessions SET head_signature = '[1,'",
    ],
    ids=["entry_not_utf8", "entry_blob", "head_seq_text", "head_signature_truncated"],
)
def test_damaged_rows_are_integrity_failures_not_a_traceback(
    closed_db: tuple[Path, str, str], sql: str
) -> None:
    damaged = closed_db[0]
    _tamper(damaged, lambda db: db.execute(sql))
    proc = _verify_cli(damaged)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "FAILED record_hash_mismatch: session " in proc.stderr
    assert "Traceback" not in proc.stderr


def test_database_file_is_private(tmp_path: Path) -> None:
    # A start on a data directory with no database (not the fixtures' migrated copy,
    # conftest.migrated_sqlite): Warden creates the file itself, private.
    data = tmp_path / "data"
    key = write_key(data / "ikm.key")
    rt = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=key))
    try:
        db = data / "warden.db"
        assert db.stat().st_mode & 0o777 == 0o600
    finally:
        rt.close()
