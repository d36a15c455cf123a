"""Migration 0010 on a database with history (both backends): existing entries become
leaves numbered in write order, existing API keys are recorded as ``keys.existing``
leaves, and the result verifies and accepts new appends after them."""

from __future__ import annotations

import json

from alembic import command
from sqlalchemy import create_engine, text

from warden.identity.api_keys import secret_digest
from warden.store import tlog_sql
from warden.store.sql import _alembic_config, open_store, parse_database_url


def test_existing_history_becomes_the_first_leaves(database_url: str) -> None:
    engine = create_engine(parse_database_url(database_url).set(drivername=(
        "postgresql+psycopg" if database_url.startswith("postgresql") else "sqlite")))  # fmt: skip
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0009")
        for sid, seq, at in (("s2", 0, "2026-01-01T00:00:02Z"), ("s1", 0, "2026-01-01T00:00:01Z"),
                             ("s1", 1, "2026-01-01T00:00:03Z")):  # fmt: skip
            conn.execute(
                text(
                    "INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, entry, "
                    "created_at) VALUES (:s, :q, 'h', :q, 't', :e, :a)"
                ),
                {"s": sid, "q": seq, "e": json.dumps({"s": sid, "q": seq}), "a": at},
            )
        conn.execute(
            text(
                "INSERT INTO api_keys (key_id, principal, role, groups, secret_hash, created_at) "
                "VALUES ('k1', 'alice', 'approver', '[\"ops\"]', 'abc', '2026-01-01T00:00:00Z')"
            )
        )
    engine.dispose()
    store = open_store(database_url)  # migrates to head
    try:
        with store.engine.connect() as conn:
            order = conn.execute(
                text("SELECT session_id, seq, log_index FROM entries ORDER BY log_index")
            ).all()
            events = conn.execute(text("SELECT log_index, event FROM log_events")).all()
        assert [tuple(r) for r in order] == [("s1", 0, 0), ("s2", 0, 1), ("s1", 1, 2)]
        assert len(events) == 1 and events[0][0] == 3
        existing = json.loads(events[0][1])
        assert existing["kind"] == "keys.existing"
        assert (existing["principal"], existing["role"], existing["groups"]) == (
            "alice",
            "approver",
            ["ops"],
        )
        assert existing["secret"] == secret_digest("abc")
        leaves = list(tlog_sql.iter_leaves(store.engine))
        assert [i for i, _ in leaves] == [0, 1, 2, 3]
        with store.transaction() as tx:
            assert tx.log_event("test.event", {}) == 4
        if store.row_locks:
            assert tlog_sql.next_index(store.engine) == 5
    finally:
        store.close()
