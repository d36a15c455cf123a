"""SQLite specifics of the SQL store: file modes, opening damaged or foreign files,
migrating an older database, and rows only SQLite's loose typing can hold.

The backend-neutral behaviour is in test_store_contract.py.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from test_store_contract import HEAD_SIG, append_next, entry_after, new_session

from warden.errors import ConfigError, IntegrityError, IntegrityReason, StoreUnavailable
from warden.store import open_store
from warden.store.sql import _alembic_config, head_revision


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


# -- file modes ---------------------------------------------------------------------------


def test_a_new_database_is_private(tmp_path: Path) -> None:
    data = tmp_path / "nested" / "data"
    store = open_store(_url(data / "warden.db"))
    try:
        sid = new_session(store)
        append_next(store, sid)
        assert _mode(data) == 0o700
        assert _mode(data / "warden.db") == 0o600
        wal = data / "warden.db-wal"
        assert wal.exists() and _mode(wal) == 0o600
    finally:
        store.close()


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    data = tmp_path / "shared"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    store = open_store(_url(data / "warden.db"))
    store.close()
    assert _mode(data) == 0o755
    assert _mode(data / "warden.db") == 0o600


# -- opening what is not (this) Warden's database ----------------------------------------


def test_a_file_that_is_not_a_database_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "warden.db"
    path.write_bytes(b"this is not an SQLite database, just some bytes\n" * 100)
    for migrate in (True, False):
        with pytest.raises(StoreUnavailable) as info:
            open_store(_url(path), migrate=migrate)
        assert "is it damaged or not a Warden database?" in info.value.message


def test_an_unversioned_database_is_refused_without_migrating(tmp_path: Path) -> None:
    path = tmp_path / "warden.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ConfigError) as info:
        open_store(_url(path), migrate=False)
    assert "is not a Warden database (no schema revision)" in info.value.message


def _engine_at(path: Path, revision: str) -> Any:
    engine = create_engine(_url(path))
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return engine


def test_an_older_schema_is_refused_without_migrating(tmp_path: Path) -> None:
    path = tmp_path / "warden.db"
    _engine_at(path, "0001").dispose()
    with pytest.raises(ConfigError) as info:
        open_store(_url(path), migrate=False)
    assert f"schema is at revision 0001, this Warden reads {head_revision()}" in (
        info.value.message
    )


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "warden.db"
    open_store(_url(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    db.close()
    for migrate in (True, False):
        with pytest.raises(ConfigError):
            open_store(_url(path), migrate=migrate)


def test_upgrading_from_0001_keeps_the_rows(tmp_path: Path) -> None:
    """0002 only adds: a 0001 database keeps its rows; they have no session signature
    and no stored request, and the chain continues."""
    path = tmp_path / "warden.db"
    engine = _engine_at(path, "0001")
    sid = str(uuid.uuid4())
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO sessions (session_id, agent_id, key_id, created_at, negotiated, "
                "closed, head_seq) VALUES (:sid, 'agent', 'client', 'then', '{}', 0, -1)"
            ),
            {"sid": sid},
        )
    engine.dispose()
    store = open_store(_url(path))
    try:
        insp = inspect(store.engine)
        assert "session_signature" in {c["name"] for c in insp.get_columns("sessions")}
        assert "request" in {c["name"] for c in insp.get_columns("entries")}
        (rec,) = store.iter_records()
        assert rec == {
            "kind": "session",
            "session_id": sid,
            "agent_id": "agent",
            "key_id": "client",
            "created_at": "then",
            "negotiated": {},
        }
        append_next(store, sid)
        entry = [r for r in store.iter_records() if r["kind"] == "entry"]
        assert len(entry) == 1 and "request" not in entry[0]
    finally:
        store.close()


def test_0002_downgrades_to_0001(tmp_path: Path) -> None:
    path = tmp_path / "warden.db"
    store = open_store(_url(path))
    sid = new_session(store)
    append_next(store, sid)
    store.close()
    engine = create_engine(_url(path))
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    insp = inspect(engine)
    assert "session_signature" not in {c["name"] for c in insp.get_columns("sessions")}
    assert "request" not in {c["name"] for c in insp.get_columns("entries")}
    assert not insp.get_indexes("entries")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM entries")).scalar_one() == 1
    engine.dispose()


# -- rows only SQLite's loose typing can hold ---------------------------------------------


@pytest.mark.parametrize(
    ("sql", "value", "column"),
    [
        ("UPDATE entries SET entry = CAST(:v AS TEXT) WHERE seq = 0", b'{"a":"\xff"}', "entry"),
        ("UPDATE entries SET entry = :v WHERE seq = 0", b"{}", "entry"),
        ("UPDATE entries SET entry = :v WHERE seq = 0", 7, "entry"),
        ("UPDATE entries SET response = CAST(:v AS TEXT) WHERE seq = 0", b"\xfe", "response"),
        ("UPDATE entries SET request = CAST(:v AS TEXT) WHERE seq = 0", b"\xfe", "request"),
        ("UPDATE sessions SET agent_id = CAST(:v AS TEXT)", b"\xc3", "agent_id"),
        ("UPDATE sessions SET key_id = :v", b"client", "key_id"),
        ("UPDATE sessions SET head_seq = :v", "zero", "head_seq"),
        ("UPDATE sessions SET head_hash = :v", b"\x00" * 32, "head_hash"),
        ("UPDATE entries SET seq = :v", b"\x00", "seq"),
    ],
    ids=[
        "entry_bad_utf8",
        "entry_blob",
        "entry_integer",
        "response_bad_utf8",
        "request_bad_utf8",
        "agent_id_bad_utf8",
        "key_id_blob",
        "head_seq_text",
        "head_hash_blob",
        "seq_blob",
    ],
)
def test_mistyped_rows_are_integrity_errors(
    tmp_path: Path, sql: str, value: Any, column: str
) -> None:
    store = open_store(_url(tmp_path / "warden.db"))
    try:
        sid = new_session(store)
        entry = entry_after(store.load_session(sid))
        store.append(
            sid,
            expected_seq=-1,
            entry=entry,
            response={"result": {}},
            head_signature=HEAD_SIG,
            replay=None,
            request="{}",
        )
        with store.engine.begin() as conn:
            conn.execute(text(sql), {"v": value})
        with pytest.raises(IntegrityError) as info:
            list(store.iter_records())
        exc = info.value
        assert exc.integrity_reason is IntegrityReason.RECORD_HASH_MISMATCH, exc.message
        assert exc.session_id == sid
        assert f"the {column} column" in exc.message
    finally:
        store.close()


def test_the_schema_revision_is_alembics_head() -> None:
    """``SCHEMA_REVISION`` is what a database at head is recognised by without Alembic:
    a new migration that does not raise it fails here."""
    from alembic.script import ScriptDirectory

    assert ScriptDirectory.from_config(_alembic_config()).get_current_head() == head_revision()


def test_a_database_at_head_opens_without_importing_alembic(tmp_path: Path) -> None:
    """A second open of a migrated database reads its revision with one query: the
    process never imports Alembic (each CLI command and server restart saves it), and
    an older database still migrates through Alembic."""
    path = tmp_path / "warden.db"
    code = (
        "import sys\n"
        "from warden.store.sql import open_store, current_revision\n"
        f"url = {_url(path)!r}\n"
        "open_store(url).close()\n"
        "print('alembic' in sys.modules, current_revision(url))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    _engine_at(path, "0013").dispose()
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["True", head_revision()]  # migrated 0013 → head
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["False", head_revision()]
