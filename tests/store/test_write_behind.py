"""The Warden-chain wires' transaction on PostgreSQL (decisions 700–701): reads sent with
``BEGIN``, appends on a head the transaction holds locked sent with the next statement
or ``COMMIT``. What a caller sees is the same on both backends: a second append to the
same chain in one transaction chains after the first, the chain verifies, and a
deferred head move that did not land refuses the commit (PostgreSQL)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import postgres_schema

from warden.errors import StoreUnavailable, UnlockedHeadMoved, WardenError
from warden.ledger.chain import chain_entry
from warden.ledger.verify import verify_records
from warden.ledger.warden_chain import chained_attempts
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


# -- decision 800: chained on a head read without a lock ---------------------------------


def _chain_of_one(store: Any, sid: str) -> tuple[int, str | None]:
    with store.transaction() as tx:
        assert tx.insert_session(_state(sid))
        first = _item(sid, (-1, None))
        tx.append(first)
    return (0, first.entry["entry_hash"])


def _entries(store: Any, sid: str) -> list[dict[str, Any]]:
    records = list(store.iter_records(sid))
    verify_records(records)  # links and hashes (raises otherwise)
    return [r for r in records if r["kind"] == "entry"]


def test_an_unlocked_head_is_read_only_where_asked_and_chains_as_before(store: Any) -> None:
    """Both backends: a transaction allowed to read heads without a lock appends on them
    as before; SQLite (one writer) reads nothing without its lock."""
    sid = str(uuid.uuid4())
    head = _chain_of_one(store, sid)
    with store.transaction(unlocked_heads=True) as tx:
        tx.prefetch(heads=(sid,))
        assert tx.budget("none") is None  # the first statement: BEGIN and the reads
        assert bool(tx._seen) is store.row_locks  # noqa: SLF001 - the read under test
        assert tx.session_head(sid) == head
        tx.append(_item(sid, head))
    assert [e["seq"] for e in _entries(store, sid)] == [0, 1]


@pytest.fixture
def pg_pair() -> Iterator[tuple[Any, Any]]:
    """Two stores on one PostgreSQL schema: two replicas' connections."""
    with postgres_schema() as url:
        one, two = open_store(url), open_store(url)
        yield one, two
        one.close()
        two.close()


def _append_locked(store: Any, sid: str) -> str:
    """Another replica's append, on the head it locks (today's path)."""
    with store.transaction() as tx:
        head = tx.session_head(sid)
        item = _item(sid, head)
        tx.append(item)
    return str(item.entry["entry_hash"])


def test_a_head_moved_after_the_unlocked_read_fails_the_commit_and_runs_again_locked(
    pg_pair: tuple[Any, Any],
) -> None:
    here, elsewhere = pg_pair
    sid = str(uuid.uuid4())
    _chain_of_one(here, sid)
    attempts: list[bool] = []

    def attempt(unlocked: bool) -> str:
        attempts.append(unlocked)
        with here.transaction(unlocked_heads=unlocked) as tx:
            tx.prefetch(heads=(sid,))
            tx.budget("none")  # BEGIN, the head read without a lock, this read
            head = tx.session_head(sid)
            if unlocked:
                _append_locked(elsewhere, sid)  # committed between the read and the append
            item = _item(sid, head)
            tx.append(item)
            tx.log_event("test.after", {"unlocked": unlocked})
        return str(item.entry["entry_hash"])

    ours = chained_attempts(attempt)
    assert attempts == [True, False]  # once unlocked, once locked: no third
    entries = _entries(here, sid)
    assert [e["seq"] for e in entries] == [0, 1, 2]
    assert entries[2]["entry"]["entry_hash"] == ours  # on top of the other replica's
    with here.engine.connect() as conn:
        events = conn.exec_driver_sql("SELECT event FROM log_events WHERE kind = 'test.after'")
        assert ['"unlocked":false' in r[0] for r in events] == [True]  # the locked run's
        indexes = sorted(int(r[0]) for r in conn.exec_driver_sql("SELECT log_index FROM entries"))
        leaves = conn.exec_driver_sql("SELECT log_index FROM log_events").all()
    every = sorted(indexes + [int(r[0]) for r in leaves])
    assert every == list(range(every[0], every[0] + len(every)))  # no gap left by it


def test_a_chain_created_by_another_replica_after_the_unlocked_read_runs_again(
    pg_pair: tuple[Any, Any],
) -> None:
    """Read as absent without a lock, created with the entry in the last round trip; a
    replica that created it first makes the commit fail, and the locked run chains on it."""
    here, elsewhere = pg_pair
    sid = str(uuid.uuid4())
    attempts: list[bool] = []

    def attempt(unlocked: bool) -> None:
        attempts.append(unlocked)
        with here.transaction(unlocked_heads=unlocked) as tx:
            tx.prefetch(heads=(sid,))
            tx.budget("none")
            head = tx.session_head(sid)
            if unlocked:
                assert head is None
                _chain_of_one(elsewhere, sid)
            if head is None:
                assert tx.insert_session(_state(sid))
                head = (-1, None)
            tx.append(_item(sid, head))

    chained_attempts(attempt)
    assert attempts == [True, False]
    assert [e["seq"] for e in _entries(here, sid)] == [0, 1]


@pytest.mark.parametrize("other_commits", [True, False], ids=["commits", "rolls-back"])
def test_an_unlocked_head_another_writer_holds_is_waited_for(
    pg_pair: tuple[Any, Any], other_commits: bool
) -> None:
    """Under READ COMMITTED the append's lock waits for the writer holding the head, then
    finds it moved (that writer committed: UnlockedHeadMoved, nothing written) or not
    (it rolled back: this entry lands)."""
    here, elsewhere = pg_pair
    sid = str(uuid.uuid4())
    _chain_of_one(here, sid)
    ready, go = threading.Event(), threading.Event()
    outcome: list[BaseException | str] = []

    def unlocked_writer() -> None:
        try:
            with here.transaction(unlocked_heads=True) as tx:
                tx.prefetch(heads=(sid,))
                tx.budget("none")
                item = _item(sid, tx.session_head(sid))
                tx.append(item)
                ready.set()
                assert go.wait(60)
            outcome.append(str(item.entry["entry_hash"]))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
            ready.set()

    worker = threading.Thread(target=unlocked_writer)
    worker.start()
    assert ready.wait(60)

    class _RolledBack(WardenError):
        pass

    try:
        with elsewhere.transaction() as tx:
            other = _item(sid, tx.session_head(sid))  # locked: today's path
            tx.append(other)
            tx.budget("none")  # the deferred append sent: the head is moved, not committed
            go.set()
            with here.engine.connect() as conn:  # wait until the commit waits for the lock
                for _ in range(600):
                    waiting = conn.exec_driver_sql(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND strpos(query, %s) > 0",
                        (sid,),
                    ).scalar_one()
                    if waiting:
                        break
                    threading.Event().wait(0.05)
                assert waiting, "the unlocked writer's commit never waited for the head"
            if not other_commits:
                raise _RolledBack("rolled back")
    except _RolledBack:  # the other writer's transaction rolled back
        pass
    worker.join(60)
    entries = _entries(here, sid)
    if other_commits:
        assert isinstance(outcome[0], UnlockedHeadMoved), outcome
        assert [e["entry"]["entry_hash"] for e in entries][1:] == [other.entry["entry_hash"]]
    else:
        assert outcome[0] == entries[1]["entry"]["entry_hash"], outcome
        assert len(entries) == 2


def test_a_second_entry_on_a_moved_head_is_not_appended_on_the_other_writers(
    pg_pair: tuple[Any, Any],
) -> None:
    """Two entries on one chain in one transaction (a quote's expired holds released,
    then its hold): the head read without a lock moved by ONE entry, so the second entry
    (seq + 2, chained on the first) finds the head at its seq — held by the other
    writer's entry. It is appended only on its own hash (decision 801): nothing lands,
    the commit is refused, the locked run chains both on the other writer's entry."""
    here, elsewhere = pg_pair
    sid = str(uuid.uuid4())
    _chain_of_one(here, sid)
    attempts: list[bool] = []

    def attempt(unlocked: bool) -> None:
        attempts.append(unlocked)
        with here.transaction(unlocked_heads=unlocked) as tx:
            tx.prefetch(heads=(sid,))
            tx.budget("none")
            head = tx.session_head(sid)
            if unlocked:
                _append_locked(elsewhere, sid)  # the head moves by exactly one entry
            tx.append(_item(sid, head))
            tx.append(_item(sid, tx.session_head(sid)))

    chained_attempts(attempt)
    assert attempts == [True, False]
    assert [e["seq"] for e in _entries(here, sid)] == [0, 1, 2, 3]  # linked (verified)
