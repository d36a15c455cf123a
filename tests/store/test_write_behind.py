"""The Warden-chain wires' transaction on PostgreSQL (decisions 700–701): reads sent with
``BEGIN``, appends on a head the transaction holds locked sent with the next statement
or ``COMMIT``. What a caller sees is the same on both backends: a second append to the
same chain in one transaction chains after the first, the chain verifies, and a
deferred head move that did not land refuses the commit (PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import postgres_schema

from warden.errors import StoreUnavailable
from warden.ledger.chain import chain_entry
from warden.ledger.verify import verify_records
from warden.spend import Budget, BudgetKind, Period
from warden.store import open_store
from warden.store.base import PendingAppend, SessionState

SIG = {"algorithm": "HMAC-SHA256", "value": "c2ln", "key_id": "w"}


@pytest.fixture
def store(database_url: str) -> Iterator[Any]:
    handle = open_store(database_url)
    yield handle
    handle.close()


def _item(sid: str, head: tuple[int, str | None]) -> PendingAppend:
    seq, previous = head
    entry = chain_entry(
        {
            "entry_id": str(uuid.uuid4()),
            "session_id": sid,
            "step_id": str(uuid.uuid4()),
            "step_type": "warden/test.event",
            "timestamp": "2026-12-01T00:00:00+00:00",
            "test": {"n": seq + 1},
        },
        previous,
    )
    return PendingAppend(
        session_id=sid,
        expected_seq=seq,
        entry=entry,
        response=None,
        head_signature=SIG,
        replay=None,
    )


def _state(sid: str) -> SessionState:
    return SessionState(
        session_id=sid,
        agent_id="warden-test:x",
        key_id="w",
        created_at="2026-12-01T00:00:00+00:00",
        negotiated={"kind": "test"},
        signature=SIG,
    )


def test_appends_in_one_transaction_chain_one_after_the_other(store: Any) -> None:
    sid = str(uuid.uuid4())
    with store.transaction() as tx:
        if store.row_locks:
            tx.prefetch(chains=(sid,))  # no chain yet: nothing held
        assert tx.session_head(sid) is None
        assert tx.insert_session(_state(sid))
        first = _item(sid, tx.session_head(sid))
        tx.append(first)
        # The head the transaction holds moved with its (possibly deferred) append.
        assert tx.session_head(sid) == (0, first.entry["entry_hash"])
        tx.append(_item(sid, tx.session_head(sid)))
        tx.log_event("test.after", {"n": 2})  # a leaf numbered after the two entries
    with store.transaction() as tx:  # a later transaction locks and reads the head
        if store.row_locks:
            tx.prefetch(chains=(sid,))
        head = tx.session_head(sid)
        assert head is not None and head[0] == 1
        tx.append(_item(sid, head))
    records = list(store.iter_records(sid))
    assert [r["seq"] for r in records if r["kind"] == "entry"] == [0, 1, 2]
    assert verify_records(records).entries == 3  # links and hashes (raises otherwise)
    with store.engine.connect() as conn:
        indexes = [
            int(r[0]) for r in conn.exec_driver_sql("SELECT log_index FROM entries ORDER BY seq")
        ]
        event = conn.exec_driver_sql(
            "SELECT log_index FROM log_events WHERE kind = 'test.after'"
        ).scalar_one()
    # Gapless, in the order made: the two entries, the event, the later entry.
    assert indexes[:2] == [indexes[0], indexes[0] + 1]
    assert event == indexes[0] + 2 and indexes[2] == indexes[0] + 3


@pytest.fixture
def pg_store() -> Iterator[Any]:
    """PostgreSQL only: SQLite runs every statement when made, nothing is deferred."""
    with postgres_schema() as url:
        handle = open_store(url)
        yield handle
        handle.close()


def test_a_deferred_head_move_that_did_not_land_refuses_the_commit(pg_store: Any) -> None:
    store = pg_store
    assert store.row_locks
    budget = Budget("wb", BudgetKind.ORG, "USD", Decimal(1), Period.NONE, principals=("p",))
    with pytest.raises(StoreUnavailable), store.transaction() as tx:
        tx.put_budget(budget)
        # A deferred write claiming a head move that no row shows.
        tx.cursor.defer("SELECT 1", None, str(uuid.uuid4()), "0" * 64)
    with store.transaction() as tx:
        assert tx.budget("wb") is None  # nothing of the refused transaction committed
