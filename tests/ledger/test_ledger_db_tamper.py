"""Tampering with the SQLite database itself is caught by ``warden verify --data-dir``.

A live runtime writes two real sessions; the runtime is closed; the database is edited
behind Warden's back with the sqlite3 module; ``python -m warden verify --data-dir D`` must
exit 1 naming the reason, the session and the entry. Untouched, it exits 0.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from ledger_chains import produce_chain

from warden.runtime import Runtime


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


CASES = (
    DbTamper("db_entry_edited", _edit_entry, "record_hash_mismatch", "A:2", "≠ recomputed"),
    DbTamper("db_response_edited", _edit_response, "signature_invalid", "A:3", "does not verify"),
    DbTamper("db_entry_deleted", _delete_entry, "chain_mismatch", "B:2", "expected seq 1"),
    DbTamper("db_entries_swapped", _swap_rows, "chain_mismatch", "A:1", "does not link"),
    DbTamper("db_head_rewound", _rewind_head, "signature_invalid", "A", "does not verify"),
    DbTamper("db_tail_dropped", _drop_last_entry, "chain_mismatch", "B", "signed head (seq 2,"),
)


def _verify_cli(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )


@pytest.fixture
def closed_db(runtime: Runtime) -> tuple[Path, str, str]:
    """(data dir, session A, session B) of a real database no process holds open."""
    sid_a, sid_b = produce_chain(runtime)
    runtime.close()
    return runtime.settings.data_dir, sid_a, sid_b


def test_untouched_database_verifies(closed_db: tuple[Path, str, str]) -> None:
    data_dir, sid_a, sid_b = closed_db
    proc = _verify_cli(data_dir)
    assert proc.returncode == 0, proc.stderr
    assert "2 sessions, 9 entries, 11 signatures checked" in proc.stdout
    assert sid_a in proc.stdout and sid_b in proc.stdout


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tampered_database_refused(closed_db: tuple[Path, str, str], case: DbTamper) -> None:
    data_dir, sid_a, sid_b = closed_db
    db = sqlite3.connect(data_dir / "warden.db")
    try:
        with db:
            case.sql(db, sid_a, sid_b)
    finally:
        db.close()
    proc = _verify_cli(data_dir)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    session, _, seq = case.where.partition(":")
    where = f"session {sid_a if session == 'A' else sid_b}"
    if seq:
        where += f" entry seq {seq}"
    assert f"FAILED {case.reason}: {where}: " in proc.stderr
    assert case.message in proc.stderr
    assert proc.stdout == ""


def test_verify_without_database_is_bad_input(tmp_path: Path) -> None:
    from conftest import write_key

    write_key(tmp_path / "ikm.key")
    proc = _verify_cli(tmp_path)
    assert proc.returncode == 2
    assert "no database at" in proc.stderr
