"""One append's read guards, head move and leaf index, on every backend (issue 16).

On SQLite the read guards and the next transparency-log index ride in the head move
itself (decision 870): these pin what that must keep — a changed guarded task is
``StaleRead`` before anything else, nothing is written by a refused append, the leaf
indexes stay gapless, and a leaf appended by another process (a CLI's log event) is
numbered around, never over.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text
from test_store_contract import HEAD_SIG, entry_after, new_session

from warden.errors import HeadMoved, ReplayDetected, StaleRead
from warden.store import open_store
from warden.store.base import PendingAppend, ReplayKeys, TaskUnchanged
from warden.store.schema import tasks

AT = "2026-12-06T18:00:00.000000+00:00"


@pytest.fixture
def handles(database_url: str) -> Iterator[Callable[[], Any]]:
    opened: list[Any] = []

    def open_() -> Any:
        opened.append(open_store(database_url))
        return opened[-1]

    yield open_
    for handle in opened:
        handle.close()


def _task(store: Any, updated_at: str = AT) -> str:
    task_id = "task_" + uuid.uuid4().hex
    with store.engine.begin() as conn:
        conn.execute(
            tasks.insert().values(
                task_id=task_id,
                kind="approval",
                status="pending",
                record="{}",
                created_at=AT,
                updated_at=updated_at,
            )
        )
    return task_id


def _touch(store: Any, task_id: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE tasks SET updated_at = :u WHERE task_id = :t"),
            {"u": "2026-12-06T18:00:01.000000+00:00", "t": task_id},
        )


def _item(
    store: Any,
    sid: str,
    guards: tuple[TaskUnchanged, ...] = (),
    *,
    expected_seq: int | None = None,
    step_id: str | None = None,
    seen: list[int] | None = None,
) -> PendingAppend:
    state = store.load_session(sid, fresh=True)
    entry = entry_after(state, step_id)

    def indexed(index: int) -> dict[str, Any]:
        if seen is not None:
            seen.append(index)
        return {"result": {"log_index": index}}

    return PendingAppend(
        session_id=sid,
        expected_seq=state.head_seq if expected_seq is None else expected_seq,
        entry=entry,
        response=None,
        head_signature=HEAD_SIG,
        replay=ReplayKeys(entry["step_id"]),
        indexed=indexed,
        guards=guards,
    )


def _indexes(store: Any) -> list[int]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT log_index FROM entries UNION ALL SELECT log_index FROM log_events "
                "ORDER BY 1"
            )
        ).all()
    return [int(r[0]) for r in rows]


def _stored_response(store: Any, sid: str, seq: int) -> str:
    with store.engine.connect() as conn:
        row = conn.execute(
            text("SELECT response FROM entries WHERE session_id = :s AND seq = :q"),
            {"s": sid, "q": seq},
        ).one()
    return str(row[0])


def test_a_holding_guard_appends_with_the_next_leaf_index(handles: Callable[[], Any]) -> None:
    store = handles()
    sid = new_session(store)
    task_id = _task(store)
    seen: list[int] = []
    for _ in range(3):
        (outcome,) = store.append_many(
            [_item(store, sid, (TaskUnchanged(task_id, AT),), seen=seen)]
        )
        assert outcome is None
    assert seen == [0, 1, 2]
    assert _indexes(store) == [0, 1, 2]
    assert _stored_response(store, sid, 2) == '{"result":{"log_index":2}}'
    assert store.load_session(sid, fresh=True).head_seq == 2


def test_a_changed_guard_is_stale_read_and_writes_nothing(handles: Callable[[], Any]) -> None:
    store = handles()
    sid = new_session(store)
    held, changed = _task(store), _task(store)
    store.append_many([_item(store, sid)])
    _touch(store, changed)
    before = store.counts()
    # The second guard fails, the first holds: either way nothing is written.
    item = _item(store, sid, (TaskUnchanged(held, AT), TaskUnchanged(changed, AT)))
    (outcome,) = store.append_many([item])
    assert isinstance(outcome, StaleRead)
    assert store.counts() == before
    assert store.load_session(sid, fresh=True).head_seq == 0
    # A missing task fails its guard as well.
    (outcome,) = store.append_many([_item(store, sid, (TaskUnchanged("task_gone", AT),))])
    assert isinstance(outcome, StaleRead)
    # The refused appends took no leaf index: the next one is gapless.
    (outcome,) = store.append_many([_item(store, sid, (TaskUnchanged(held, AT),))])
    assert outcome is None
    assert _indexes(store) == [0, 1]


def test_a_changed_guard_is_reported_before_a_moved_head(handles: Callable[[], Any]) -> None:
    store = handles()
    sid = new_session(store)
    task_id = _task(store)
    store.append_many([_item(store, sid)])
    _touch(store, task_id)
    stale = _item(store, sid, (TaskUnchanged(task_id, AT),), expected_seq=-1)
    (outcome,) = store.append_many([stale])
    assert isinstance(outcome, StaleRead)


def test_a_moved_head_with_holding_guards_is_head_moved(handles: Callable[[], Any]) -> None:
    store = handles()
    sid = new_session(store)
    task_id = _task(store)
    store.append_many([_item(store, sid)])
    stale = _item(store, sid, (TaskUnchanged(task_id, AT),), expected_seq=-1)
    (outcome,) = store.append_many([stale])
    assert isinstance(outcome, HeadMoved) and not isinstance(outcome, StaleRead)
    assert _indexes(store) == [0]


def test_a_refused_request_id_with_holding_guards_is_a_replay(
    handles: Callable[[], Any],
) -> None:
    store = handles()
    sid = new_session(store)
    task_id = _task(store)
    store.record_replay(sid, ReplayKeys("refused-step"))
    item = _item(store, sid, (TaskUnchanged(task_id, AT),), step_id="refused-step")
    (outcome,) = store.append_many([item])
    assert isinstance(outcome, ReplayDetected)
    assert store.load_session(sid, fresh=True).head_seq == -1
    assert _indexes(store) == []


def test_a_leaf_appended_by_another_process_is_numbered_around(
    handles: Callable[[], Any],
) -> None:
    """A writer beside this one (``warden`` CLI commands append log events) takes the
    next index between two appends of this handle: the next entry is numbered after it."""
    store, cli = handles(), handles()
    sid = new_session(store)
    seen: list[int] = []
    store.append_many([_item(store, sid, seen=seen)])
    with cli.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO log_events (log_index, kind, event, created_at) "
                "VALUES (1, 'cli.test', '{}', :at)"
            ),
            {"at": AT},
        )
        if cli.row_locks:  # PostgreSQL numbers leaves by its counter row
            conn.execute(text("UPDATE log_state SET next_index = 2 WHERE id = 1"))
    store.append_many([_item(store, sid, seen=seen)])
    assert seen == [0, 2]
    assert _indexes(store) == [0, 1, 2]


def test_now_is_isoformat_in_utc_with_z() -> None:
    import re
    from datetime import UTC, datetime

    from warden.store.sql import _now

    for _ in range(3):
        before = datetime.now(UTC)
        stamp = _now()
        after = datetime.now(UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp), stamp
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert before <= at <= after
        assert at.isoformat(timespec="microseconds").replace("+00:00", "Z") == stamp


def test_a_moved_cached_session_is_replace_of_its_fields() -> None:
    from dataclasses import fields, replace

    from warden.store.base import SessionState
    from warden.store.sql import _moved_state

    state = SessionState("s", "a", "k", "2026", {"n": 1}, False, 4, "h" * 64, {"sig": 1})
    for close in (False, True):
        moved = _moved_state(state, 5, "g" * 64, close)
        expected = replace(state, head_seq=5, head_hash="g" * 64, closed=close)
        assert moved == expected
        assert [getattr(moved, f.name) for f in fields(SessionState)] == [
            getattr(expected, f.name) for f in fields(SessionState)
        ]
    closed = replace(state, closed=True)
    assert _moved_state(closed, 5, "g" * 64, False).closed  # closing is sticky
    assert state.head_seq == 4  # the cached state itself is not changed
