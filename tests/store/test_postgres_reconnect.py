"""A PostgreSQL connection the server drops (restart, failover, a terminated backend)
costs a reconnect, not the request: reads are repeated once, a write transaction begins
again on a new connection (nothing had been done), and the store keeps working."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from conftest import POSTGRES_URL, postgres_schema
from sqlalchemy import create_engine, text

from warden.errors import StoreUnavailable
from warden.spend import Budget, BudgetKind, Period
from warden.store import open_store
from warden.store.base import ReplayKeys
from warden.store.sql import SqlStore


@pytest.fixture
def store() -> Iterator[SqlStore]:
    with postgres_schema() as url:
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


def terminate(store: SqlStore) -> None:
    """Have the server end the store's backend (as a restart or failover would)."""
    pid = store._raw.dbapi_connection.info.backend_pid  # noqa: SLF001 - the test's target
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            assert conn.execute(text(f"SELECT pg_terminate_backend({pid})")).scalar() is True
    finally:
        admin.dispose()


def test_reads_survive_a_dropped_connection(store: SqlStore) -> None:
    terminate(store)
    store.ping()
    terminate(store)
    assert store.seen("s-1", ReplayKeys("r-1", None)) is False
    terminate(store)
    assert store.load_session("nope", fresh=True) is None


def test_a_write_transaction_survives_a_dropped_connection(store: SqlStore) -> None:
    terminate(store)
    with store.transaction() as tx:
        tx.put_budget(Budget("org", BudgetKind.ORG, "USD", Decimal(100), Period.NONE))
    terminate(store)
    assert [b.id for b in store.budgets()] == ["org"]


def test_a_closed_store_says_so() -> None:
    with postgres_schema() as url:
        s = open_store(url)
        s.close()
        with pytest.raises(StoreUnavailable, match="closed"):
            s.ping()


def _setting(store: SqlStore, name: str) -> str:
    cur = store._raw.cursor()  # noqa: SLF001 - reading the session's own settings
    try:
        cur.execute(f"SHOW {name}")
        return str(cur.fetchone()[0])
    finally:
        cur.close()


def test_connections_bound_lock_waits_and_idle_transactions(store: SqlStore) -> None:
    assert _setting(store, "lock_timeout") == "5s"
    assert _setting(store, "idle_in_transaction_session_timeout") == "15s"


def test_settings_in_the_url_win() -> None:
    with postgres_schema() as url:
        s = open_store(url.replace("search_path%3D", "lock_timeout%3D1s%20-csearch_path%3D"))
        try:
            assert _setting(s, "lock_timeout") == "1s"
            assert _setting(s, "idle_in_transaction_session_timeout") == "15s"
            assert _setting(s, "search_path").startswith("wt_")
        finally:
            s.close()
