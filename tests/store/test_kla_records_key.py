"""Migration 0015 keys ``kla_records`` by (principal, record_id) (decision 970), on
SQLite (the table rebuilt) and PostgreSQL (the constraint replaced): rows stored before
it are kept as they were, another principal may then store a record under an id
already used, and one principal still may not store two under one id."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, inspect

from warden.store import open_store
from warden.store.sql import _alembic_config

_COLUMNS = (
    "record_id, kind, action_request_id, execution_id, principal, digest, record, "
    "signature, kid, status, created_at, signatures"
)


def _insert(conn: Any, record_id: str, principal: str) -> None:
    conn.exec_driver_sql(
        f"INSERT INTO kla_records ({_COLUMNS}) VALUES ('{record_id}', 'action_request', "
        f"'{record_id}', 'exec-1', '{principal}', 'sha256:00', '{{}}', 'sig', 'kid-1', "
        "'processed', '2026-12-01T00:00:00.000000Z', NULL)"
    )


def _rows(conn: Any) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.exec_driver_sql(
            f"SELECT {_COLUMNS} FROM kla_records ORDER BY principal, record_id"
        ).fetchall()
    ]


def test_migration_0015_keys_kla_records_per_principal(database_url: str) -> None:
    from alembic import command

    engine = create_engine(database_url)
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0014")
        _insert(conn, "req-1", "bot-1")
        _insert(conn, "req-2", "bot-2")
        before = _rows(conn)
    engine.dispose()
    store = open_store(database_url)  # migrates to head
    try:
        insp = inspect(store.engine)
        pk = insp.get_pk_constraint("kla_records")
        assert pk["constrained_columns"] == ["principal", "record_id"]
        indexes = {i["name"]: i["column_names"] for i in insp.get_indexes("kla_records")}
        assert indexes == {
            "ix_kla_records_execution": ["execution_id"],
            "ix_kla_records_request": ["action_request_id"],
        }
        with store.engine.begin() as conn:
            assert _rows(conn) == before
            _insert(conn, "req-1", "bot-2")  # bot-1's id, bot-2's record: allowed now
        with store.engine.begin() as conn:
            assert [r[:5:4] for r in _rows(conn)] == [
                ("req-1", "bot-1"),
                ("req-1", "bot-2"),
                ("req-2", "bot-2"),
            ]
        with pytest.raises(Exception, match="(?i)unique|duplicate"), store.engine.begin() as conn:
            _insert(conn, "req-1", "bot-1")
    finally:
        store.close()
