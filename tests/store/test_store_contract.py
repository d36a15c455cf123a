"""The Store contract (src/warden/store/base.py), run against every implementation.

Every test runs on each backend of conftest's ``database_url`` fixture (a SQLite file, a
fresh PostgreSQL schema); ``open_handle`` opens a *new handle* on that one database
(calling it twice gives two handles on the same data, which is how the reopen and
cross-handle race tests work). Nothing below may depend
on SQLite; SQL-level checks (migrations, sabotage) go through ``store.engine``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import TEST_IKM, migrated_store_url
from sqlalchemy import inspect, text

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, SessionKeys, hmac_sign
from warden.errors import (
    HeadMoved,
    IntegrityError,
    IntegrityReason,
    ReplayDetected,
    SessionRefused,
    StoreUnavailable,
)
from warden.ledger.chain import chain_entry
from warden.ledger.verify import verify_records
from warden.store import open_store
from warden.store.base import PendingAppend, ReplayKeys, SessionState
from warden.store.schema import metadata
from warden.store.sql import head_revision

HEAD_SIG = {"algorithm": "HMAC-SHA256", "value": "c2ln", "key_id": "contract"}
CREATED_AT = "2026-11-29T12:00:00+00:00"
NEGOTIATED = {"server_hello": {"methods_evaluated": ["steps/toolCallRequest"]}}


#: The tests whose subject is migrating an empty database: every other test starts on
#: conftest's migrated template (the same schema, tests/store/test_postgres_template.py).
FROM_EMPTY = {
    "test_migrations_create_the_schema_from_empty",
    "test_migrating_twice_changes_nothing",
}


@pytest.fixture
def open_handle(database_url: str, request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
    """Open another handle on this test's database; every handle is closed at teardown."""
    handles: list[Any] = []
    if request.node.originalname not in FROM_EMPTY:
        migrated_store_url(database_url)

    def open_() -> Any:
        handle = open_store(database_url)
        handles.append(handle)
        return handle

    yield open_
    for handle in handles:
        handle.close()


@pytest.fixture
def store(open_handle: Callable[[], Any]) -> Any:
    return open_handle()


def _sign(sid: str, record: dict[str, Any]) -> dict[str, Any]:
    """HMAC-SHA256 under the session key over the JCS of ``record``, as warden.ledger signs."""
    value = hmac_sign(SessionKeys(TEST_IKM).key_for(sid), canonical_bytes(record))
    return {"algorithm": HMAC_ALGORITHM, "value": value, "key_id": "contract"}


def session_signature(sid: str) -> dict[str, Any]:
    """The signature of the session record ``new_session`` creates."""
    record = {
        "kind": "session",
        "session_id": sid,
        "agent_id": "agent",
        "key_id": "client",
        "created_at": CREATED_AT,
        "negotiated": NEGOTIATED,
    }
    return _sign(sid, record)


def new_session(store: Any, sid: str | None = None, *, rid: str | None = None) -> str:
    sid = sid or str(uuid.uuid4())
    store.create_session(
        SessionState(
            session_id=sid,
            agent_id="agent",
            key_id="client",
            created_at=CREATED_AT,
            negotiated=NEGOTIATED,
            signature=session_signature(sid),
        ),
        ReplayKeys(rid or str(uuid.uuid4())),
    )
    return sid


def entry_after(state: SessionState, step_id: str | None = None) -> dict[str, Any]:
    content = {
        "entry_id": str(uuid.uuid4()),
        "session_id": state.session_id,
        "step_id": step_id or str(uuid.uuid4()),
        "step_type": "contract/test",
        "timestamp": "2026-11-29T12:00:00Z",
    }
    return chain_entry(content, state.head_hash)


def append_next(
    store: Any,
    sid: str,
    *,
    replay: ReplayKeys | None = None,
    close: bool = False,
    step_id: str | None = None,
) -> dict[str, Any]:
    state = store.load_session(sid, fresh=True)
    entry = entry_after(state, step_id)
    store.append(
        sid,
        expected_seq=state.head_seq,
        entry=entry,
        response=None,
        head_signature=HEAD_SIG,
        replay=replay if replay is not None else ReplayKeys(entry["step_id"]),
        close=close,
    )
    return entry


def signed_head(sid: str, seq: int, chain_hash: str, closed: bool = False) -> dict[str, Any]:
    """A head checkpoint signed as warden.ledger does (HMAC over the JCS of the record)."""
    record = {
        "kind": "head",
        "session_id": sid,
        "seq": seq,
        "chain_hash": chain_hash,
        "closed": closed,
    }
    return _sign(sid, record)


def snapshot(store: Any) -> tuple[dict[str, int], list[dict[str, Any]]]:
    return dict(store.counts()), list(store.iter_records())


# -- sessions -----------------------------------------------------------------------------


def test_fresh_database_is_empty(store: Any) -> None:
    assert store.counts() == {"sessions": 0, "replay_keys": 0, "entries": 0}
    assert list(store.iter_records()) == []


def test_create_and_load_session(store: Any) -> None:
    sid = new_session(store, rid="r-hello")
    state = store.load_session(sid)
    assert state == SessionState(
        session_id=sid,
        agent_id="agent",
        key_id="client",
        created_at=CREATED_AT,
        negotiated=NEGOTIATED,
        closed=False,
        head_seq=-1,
        head_hash=None,
        signature=session_signature(sid),
    )
    assert store.load_session(sid, fresh=True) == state
    assert store.seen(sid, ReplayKeys("r-hello"))
    assert store.counts() == {"sessions": 1, "replay_keys": 1, "entries": 0}
    assert store.load_session(str(uuid.uuid4())) is None


def test_create_session_twice_is_refused_and_writes_nothing(store: Any) -> None:
    sid = new_session(store)
    before = snapshot(store)
    with pytest.raises(SessionRefused) as info:
        new_session(store, sid, rid="r-second-hello")
    assert info.value.reason == "renegotiation_not_supported"
    assert snapshot(store) == before
    assert not store.seen(sid, ReplayKeys("r-second-hello"))


# -- replay keys --------------------------------------------------------------------------


def test_replay_keys_are_refused_twice_and_atomically(store: Any) -> None:
    sid = new_session(store, rid="r0")
    store.record_replay(sid, ReplayKeys("r1"))
    store.record_replay(sid, ReplayKeys("r2", nonce="n" * 16))
    before = snapshot(store)

    for replay in (
        ReplayKeys("r0"),  # the handshake's own request_id
        ReplayKeys("r1"),
        ReplayKeys("r2"),
        ReplayKeys("r3", nonce="n" * 16),  # fresh request_id, reused nonce
        ReplayKeys("r1", nonce="m" * 16),  # reused request_id, fresh nonce
    ):
        with pytest.raises(ReplayDetected):
            store.record_replay(sid, replay)
        assert snapshot(store) == before, replay
    assert not store.seen(sid, ReplayKeys("r3"))
    assert not store.seen(sid, ReplayKeys("zz", nonce="m" * 16))
    assert store.seen(sid, ReplayKeys("zz", nonce="n" * 16))
    assert before[0]["replay_keys"] == 4


def test_replay_keys_are_per_session(store: Any) -> None:
    a = new_session(store, rid="same")
    b = new_session(store, rid="same")
    assert store.seen(a, ReplayKeys("same")) and store.seen(b, ReplayKeys("same"))
    store.record_replay(a, ReplayKeys("x"))
    assert not store.seen(b, ReplayKeys("x"))
    store.record_replay(b, ReplayKeys("x"))
    assert store.counts()["replay_keys"] == 4


def test_a_chained_request_id_is_recorded_by_its_entry_alone(store: Any) -> None:
    """Issue 16: no replay_keys row where the entries' unique (session_id, step_id) index
    already refuses the replay (decision 273); the id is still seen and refused."""
    sid = new_session(store)
    before = store.counts()["replay_keys"]
    append_next(store, sid, step_id="step-a")
    assert store.counts()["replay_keys"] == before
    assert store.seen(sid, ReplayKeys("step-a"))
    assert not store.seen(sid, ReplayKeys("step-b"))
    frozen = snapshot(store)
    with pytest.raises(ReplayDetected):
        store.record_replay(sid, ReplayKeys("step-a"))  # a refusal of the same id, later
    assert snapshot(store) == frozen


def test_a_refused_request_id_is_never_chained_later(store: Any) -> None:
    """A step refused before its entry recorded its id in replay_keys; an append of that
    id is ReplayDetected and writes nothing, alone and inside a batch."""
    sid = new_session(store)
    store.record_replay(sid, ReplayKeys("refused-1"))
    state = store.load_session(sid, fresh=True)
    before = snapshot(store)
    with pytest.raises(ReplayDetected):
        store.append(
            sid,
            expected_seq=state.head_seq,
            entry=entry_after(state, "refused-1"),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("refused-1"),
        )
    assert snapshot(store) == before
    other = new_session(store)
    fresh = entry_after(store.load_session(other))
    outcomes = store.append_many(
        [
            PendingAppend(sid, state.head_seq, entry_after(state, "refused-1"), None, HEAD_SIG,
                          ReplayKeys("refused-1")),
            PendingAppend(other, -1, fresh, None, HEAD_SIG, ReplayKeys(fresh["step_id"])),
        ]
    )  # fmt: skip
    assert isinstance(outcomes[0], ReplayDetected) and outcomes[1] is None, outcomes
    assert store.load_session(sid, fresh=True).head_seq == state.head_seq
    assert store.load_session(other, fresh=True).head_hash == fresh["entry_hash"]


def test_an_appended_steps_nonce_is_still_recorded_and_refused(store: Any) -> None:
    sid = new_session(store)
    before = store.counts()["replay_keys"]
    append_next(store, sid, replay=ReplayKeys("n-step-1", nonce="q" * 16), step_id="n-step-1")
    assert store.counts()["replay_keys"] == before + 1  # the nonce only
    assert store.seen(sid, ReplayKeys("unrelated", nonce="q" * 16))
    state = store.load_session(sid, fresh=True)
    frozen = snapshot(store)
    with pytest.raises(ReplayDetected):
        store.append(
            sid,
            expected_seq=state.head_seq,
            entry=entry_after(state, "n-step-2"),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("n-step-2", nonce="q" * 16),
        )
    assert snapshot(store) == frozen


def test_a_request_id_other_than_the_step_id_keeps_its_row(store: Any) -> None:
    sid = new_session(store)
    before = store.counts()["replay_keys"]
    append_next(store, sid, replay=ReplayKeys("not-the-step"), step_id="the-step")
    assert store.counts()["replay_keys"] == before + 1
    with pytest.raises(ReplayDetected):
        store.record_replay(sid, ReplayKeys("not-the-step"))


# -- appends ------------------------------------------------------------------------------


def test_append_advances_the_head(store: Any) -> None:
    sid = new_session(store)
    first = append_next(store, sid)
    second = append_next(store, sid)
    assert second["previous_hash"] == first["entry_hash"]
    state = store.load_session(sid)
    assert (state.head_seq, state.head_hash, state.closed) == (1, second["entry_hash"], False)
    records = list(store.iter_records(sid))
    assert [r["kind"] for r in records] == ["session", "entry", "entry", "head"]
    assert [r["entry"] for r in records[1:3]] == [first, second]
    assert records[0] == {
        "kind": "session",
        "session_id": sid,
        "agent_id": "agent",
        "key_id": "client",
        "created_at": CREATED_AT,
        "negotiated": NEGOTIATED,
        "signature": session_signature(sid),
    }
    assert records[3] == {
        "kind": "head",
        "session_id": sid,
        "seq": 1,
        "chain_hash": second["entry_hash"],
        "closed": False,
        "signature": HEAD_SIG,
    }
    # The steps' request ids are their entries' step ids: no replay_keys row (decision 273).
    assert store.counts() == {"sessions": 1, "replay_keys": 1, "entries": 2}
    assert store.seen(sid, ReplayKeys(first["step_id"]))


def test_append_stores_the_response_beside_the_entry(store: Any) -> None:
    sid = new_session(store)
    state = store.load_session(sid)
    entry = entry_after(state)
    response = {"jsonrpc": "2.0", "id": "1", "result": {"chain_hash": entry["entry_hash"]}}
    store.append(
        sid,
        expected_seq=-1,
        entry=entry,
        response=response,
        head_signature=HEAD_SIG,
        replay=None,
    )
    (rec,) = [r for r in store.iter_records(sid) if r["kind"] == "entry"]
    assert rec == {"kind": "entry", "session_id": sid, "seq": 0, "entry": entry,
                   "response": response}  # fmt: skip


@pytest.mark.parametrize("expected_seq", [-1, 1, 7], ids=["behind", "ahead", "far_ahead"])
def test_stale_expected_seq_is_head_moved_and_writes_nothing(store: Any, expected_seq: int) -> None:
    sid = new_session(store)
    append_next(store, sid)  # head is now seq 0
    state = store.load_session(sid)
    before = snapshot(store)
    with pytest.raises(HeadMoved):
        store.append(
            sid,
            expected_seq=expected_seq,
            entry=entry_after(state, "late-step"),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("late-step", nonce="late-nonce-0123456"),
            close=True,
        )
    assert snapshot(store) == before
    assert store.load_session(sid, fresh=True) == state
    assert not store.seen(sid, ReplayKeys("late-step"))
    assert not store.seen(sid, ReplayKeys("other", nonce="late-nonce-0123456"))


def test_append_to_unknown_session_writes_nothing(store: Any) -> None:
    new_session(store)
    before = snapshot(store)
    ghost = str(uuid.uuid4())
    with pytest.raises(HeadMoved):
        store.append(
            ghost,
            expected_seq=-1,
            entry=chain_entry({"session_id": ghost, "step_id": "s"}, None),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("s"),
        )
    assert snapshot(store) == before
    assert not store.seen(ghost, ReplayKeys("s"))


def test_append_with_a_replayed_key_writes_nothing(store: Any) -> None:
    sid = new_session(store)
    first = append_next(store, sid, replay=ReplayKeys("step-1", nonce="nonce-aaaaaaaaaaaa"))
    store.record_replay(sid, ReplayKeys("refused-step"))
    state = store.load_session(sid)
    before = snapshot(store)
    for replay in (
        ReplayKeys("step-1"),
        ReplayKeys("refused-step"),
        ReplayKeys("fresh", nonce="nonce-aaaaaaaaaaaa"),
    ):
        with pytest.raises(ReplayDetected):
            store.append(
                sid,
                expected_seq=0,
                entry=entry_after(state),
                response=None,
                head_signature=HEAD_SIG,
                replay=replay,
            )
        assert snapshot(store) == before
        assert store.load_session(sid, fresh=True).head_hash == first["entry_hash"]
    assert not store.seen(sid, ReplayKeys("fresh"))


def test_close_is_recorded_and_sticky(store: Any) -> None:
    sid = new_session(store)
    append_next(store, sid, close=True)
    assert store.load_session(sid).closed is True
    assert store.load_session(sid, fresh=True).closed is True
    append_next(store, sid, close=False)
    assert store.load_session(sid, fresh=True).closed is True


def test_iter_records_filters_by_session(store: Any) -> None:
    a, b = new_session(store), new_session(store)
    append_next(store, a)
    append_next(store, b)
    append_next(store, b)
    assert {r["session_id"] for r in store.iter_records(b)} == {b}
    assert [r["kind"] for r in store.iter_records(b)] == ["session", "entry", "entry", "head"]
    assert len(list(store.iter_records())) == 7
    empty = new_session(store)
    assert [r["kind"] for r in store.iter_records(empty)] == ["session"]


def test_append_many_gives_per_item_outcomes(store: Any) -> None:
    a, b, c = new_session(store), new_session(store), new_session(store)
    append_next(store, b)
    store.record_replay(c, ReplayKeys("used"))
    sa, sb, sc = (store.load_session(s, fresh=True) for s in (a, b, c))
    ea, eb, ec = entry_after(sa), entry_after(sb), entry_after(sc)
    before_b = list(store.iter_records(b))
    outcomes = store.append_many(
        [
            PendingAppend(a, -1, ea, None, HEAD_SIG, ReplayKeys(ea["step_id"])),
            PendingAppend(b, -1, eb, None, HEAD_SIG, ReplayKeys(eb["step_id"])),  # stale
            PendingAppend(c, -1, ec, None, HEAD_SIG, ReplayKeys("used")),  # replay
        ]
    )
    assert [type(o) for o in outcomes] == [type(None), HeadMoved, ReplayDetected]
    assert store.load_session(a, fresh=True).head_hash == ea["entry_hash"]
    assert list(store.iter_records(b)) == before_b
    assert not store.seen(b, ReplayKeys(eb["step_id"]))
    assert store.load_session(c, fresh=True).head_seq == -1
    assert store.counts()["entries"] == 2


def test_foreign_failure_is_store_unavailable_and_writes_nothing(store: Any) -> None:
    sid = new_session(store)
    append_next(store, sid)
    state = store.load_session(sid, fresh=True)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE entries RENAME TO entries_gone"))
    with pytest.raises(StoreUnavailable):
        store.append(
            sid,
            expected_seq=0,
            entry=entry_after(state, "doomed"),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("doomed"),
        )
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE entries_gone RENAME TO entries"))
    assert store.load_session(sid, fresh=True) == state
    assert not store.seen(sid, ReplayKeys("doomed"))
    assert store.counts()["entries"] == 1


# -- session signatures, the request, one entry per request id -----------------------------


def test_session_signer_signs_sessions_created_without_a_signature(store: Any) -> None:
    signed: list[str] = []

    def signer(state: SessionState) -> dict[str, Any]:
        signed.append(state.session_id)
        return session_signature(state.session_id)

    unsigned = str(uuid.uuid4())
    store.create_session(
        SessionState(unsigned, "agent", "client", CREATED_AT, NEGOTIATED), ReplayKeys("r0")
    )
    (rec,) = store.iter_records(unsigned)
    assert "signature" not in rec
    assert store.load_session(unsigned, fresh=True).signature is None

    store.session_signer = signer
    sid = str(uuid.uuid4())
    store.create_session(
        SessionState(sid, "agent", "client", CREATED_AT, NEGOTIATED), ReplayKeys("r1")
    )
    assert signed == [sid]
    assert store.load_session(sid).signature == session_signature(sid)
    assert store.load_session(sid, fresh=True).signature == session_signature(sid)
    (rec,) = store.iter_records(sid)
    assert rec["signature"] == session_signature(sid)
    new_session(store)  # a session that brings its own signature is not re-signed
    assert signed == [sid]


def test_append_stores_the_request_beside_the_entry(store: Any) -> None:
    sid = new_session(store)
    state = store.load_session(sid)
    entry = entry_after(state)
    store.append(
        sid,
        expected_seq=-1,
        entry=entry,
        response=None,
        head_signature=HEAD_SIG,
        replay=None,
        request='{"request_id":"r"}',
    )
    state = store.load_session(sid, fresh=True)
    second = entry_after(state)
    assert store.append_many(
        [PendingAppend(sid, 0, second, None, HEAD_SIG, None, request='{"n":2}')]
    ) == [None]
    append_next(store, sid)  # no request: no member
    records = [r for r in store.iter_records(sid) if r["kind"] == "entry"]
    assert [r.get("request") for r in records] == ['{"request_id":"r"}', '{"n":2}', None]
    assert "request" not in records[2]


def test_a_request_id_is_chained_once_even_without_its_replay_keys(store: Any) -> None:
    """The unique (session_id, step_id) index: deleting the replay keys does not let a
    request be chained twice; the second append is ReplayDetected and writes nothing."""
    sid = new_session(store)
    first = append_next(store, sid, step_id="step-1")
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM replay_keys"))
    state = store.load_session(sid, fresh=True)
    before = snapshot(store)
    with pytest.raises(ReplayDetected):
        store.append(
            sid,
            expected_seq=0,
            entry=entry_after(state, "step-1"),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("step-1"),
        )
    assert snapshot(store) == before
    assert store.load_session(sid, fresh=True).head_hash == first["entry_hash"]
    assert store.seen(sid, ReplayKeys("step-1"))  # its entry records it (decision 273)

    # In a batch the replay fails alone; the other session's append commits.
    other = new_session(store)
    fresh = entry_after(store.load_session(other))
    outcomes = store.append_many(
        [
            PendingAppend(sid, 0, entry_after(state, "step-1"), None, HEAD_SIG, None),
            PendingAppend(other, -1, fresh, None, HEAD_SIG, ReplayKeys(fresh["step_id"])),
        ]
    )
    assert [type(o) for o in outcomes] == [ReplayDetected, type(None)]
    assert store.load_session(other, fresh=True).head_hash == fresh["entry_hash"]
    # The same request id in another session is a different request.
    append_next(store, other, step_id="step-1")


def test_entries_without_a_step_id_are_not_one_per_session(store: Any) -> None:
    sid = new_session(store)
    for seq in range(2):
        state = store.load_session(sid, fresh=True)
        entry = chain_entry({"session_id": sid, "n": seq}, state.head_hash)
        store.append(
            sid,
            expected_seq=state.head_seq,
            entry=entry,
            response=None,
            head_signature=HEAD_SIG,
            replay=None,
        )
    assert store.load_session(sid, fresh=True).head_seq == 1


# -- iter_records vouches for what the database holds ------------------------------------


def _sabotage(store: Any, sql: str, **params: Any) -> None:
    with store.engine.begin() as conn:
        conn.execute(text(sql), params)


def _refused(store: Any, session_id: str | None = None) -> IntegrityError:
    with pytest.raises(IntegrityError) as info:
        list(store.iter_records(session_id))
    return info.value


def test_entries_of_a_deleted_session_row_are_refused(store: Any) -> None:
    a, b = new_session(store), new_session(store)
    append_next(store, a)
    append_next(store, b)
    _sabotage(store, "DELETE FROM sessions WHERE session_id = :sid", sid=a)
    for scope in (None, a):
        exc = _refused(store, scope)
        assert exc.integrity_reason is IntegrityReason.CHAIN_MISMATCH
        assert (exc.session_id, exc.seq) == (a, None)
        assert "1 audit entries belong to no session record" in exc.message
    assert [r["kind"] for r in store.iter_records(b)] == ["session", "entry", "head"]


_DUPLICATE_STEP_TYPE = (
    "UPDATE entries SET entry = replace(entry, '\"step_type\":', "
    '\'"step_type":"forged","step_type":\') WHERE seq = 1'
)
BAD_ROWS = [
    # (test id, column named in the error, SQL, :v, entry seq named in the error)
    ("entry_duplicate_key", "entry", _DUPLICATE_STEP_TYPE, None, 1),
    ("entry_not_json", "entry", "UPDATE entries SET entry = :v WHERE seq = 1", "{", 1),
    ("entry_not_object", "entry", "UPDATE entries SET entry = :v WHERE seq = 1", "[1]", 1),
    ("response_duplicate_key", "response", "UPDATE entries SET response = :v WHERE seq = 0",
     '{"a":1,"a":2}', 0),
    ("head_signature_not_json", "head_signature", "UPDATE sessions SET head_signature = :v",
     "not json", None),
    ("negotiated_nan", "negotiated", "UPDATE sessions SET negotiated = :v", '{"x":NaN}', None),
    ("session_signature_not_json", "session_signature",
     "UPDATE sessions SET session_signature = :v", "{", None),
    ("entry_hash_column", "entry_hash", "UPDATE entries SET entry_hash = :v WHERE seq = 1",
     "0" * 64, 1),
    ("step_id_column", "step_id", "UPDATE entries SET step_id = :v WHERE seq = 0",
     "another-step", 0),
    ("step_type_column", "step_type", "UPDATE entries SET step_type = :v WHERE seq = 1",
     "steps/sessionEnd", 1),
]  # fmt: skip


@pytest.mark.parametrize(
    ("column", "sql", "value", "seq"), [r[1:] for r in BAD_ROWS], ids=[r[0] for r in BAD_ROWS]
)
def test_rows_that_would_not_export_faithfully_are_refused(
    store: Any, column: str, sql: str, value: Any, seq: int | None
) -> None:
    """Every stored JSON column is parsed strictly; the denormalized columns must agree
    with the entry. Either failure is record_hash_mismatch at the row."""
    sid = new_session(store)
    append_next(store, sid)
    append_next(store, sid, close=True)
    _sabotage(store, sql, v=value)
    exc = _refused(store)
    assert exc.integrity_reason is IntegrityReason.RECORD_HASH_MISMATCH, exc.message
    assert (exc.session_id, exc.seq) == (sid, seq)
    assert f"the {column} column" in exc.message


def test_a_closed_session_without_entries_is_refused(store: Any) -> None:
    sid = new_session(store)
    _sabotage(store, "UPDATE sessions SET closed = :yes", yes=True)
    exc = _refused(store)
    assert exc.integrity_reason is IntegrityReason.CHAIN_MISMATCH
    assert (exc.session_id, exc.seq) == (sid, None)


def test_an_unreadable_database_is_store_unavailable(store: Any) -> None:
    sid = new_session(store)
    append_next(store, sid)
    _sabotage(store, "DROP TABLE entries")
    with pytest.raises(StoreUnavailable):
        list(store.iter_records())


# -- concurrency --------------------------------------------------------------------------


def _race(n: int, work: Callable[[int], None]) -> list[BaseException | None]:
    barrier = threading.Barrier(n)
    results: list[BaseException | None] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return results


@pytest.mark.parametrize("handles", [1, 4], ids=["one_handle", "four_handles"])
def test_racing_appends_for_one_seq_have_exactly_one_winner(
    open_handle: Callable[[], Any], handles: int
) -> None:
    stores = [open_handle() for _ in range(handles)]
    sid = new_session(stores[0])
    state = stores[0].load_session(sid)
    n = 8
    entries = [entry_after(state, f"step-{i}") for i in range(n)]

    def work(i: int) -> None:
        stores[i % handles].append(
            sid,
            expected_seq=-1,
            entry=entries[i],
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys(f"step-{i}"),
        )

    results = _race(n, work)
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, HeadMoved) for r in results if r is not None), results
    final = stores[0].load_session(sid, fresh=True)
    assert (final.head_seq, final.head_hash) == (0, entries[winners[0]]["entry_hash"])
    assert stores[0].counts() == {"sessions": 1, "replay_keys": 1, "entries": 1}


def test_concurrent_writers_build_one_unforked_chain(open_handle: Callable[[], Any]) -> None:
    """Writers on separate handles retry on HeadMoved; the result is one linear chain."""
    writers, per_writer = 4, 12
    stores = [open_handle() for _ in range(writers)]
    sid = new_session(stores[0])
    lost_races = [0] * writers

    def work(w: int) -> None:
        for k in range(per_writer):
            step = f"w{w}-{k}"
            while True:
                state = stores[w].load_session(sid, fresh=True)
                entry = entry_after(state, step)
                seq = state.head_seq + 1
                try:
                    stores[w].append(
                        sid,
                        expected_seq=state.head_seq,
                        entry=entry,
                        response=None,
                        head_signature=signed_head(sid, seq, entry["entry_hash"]),
                        replay=ReplayKeys(step),
                    )
                    break
                except HeadMoved:
                    lost_races[w] += 1

    assert _race(writers, work) == [None] * writers
    records = list(stores[0].iter_records(sid))
    chain = [r for r in records if r["kind"] == "entry"]
    total = writers * per_writer
    assert [r["seq"] for r in chain] == list(range(total))
    assert sorted(r["entry"]["step_id"] for r in chain) == sorted(
        f"w{w}-{k}" for w in range(writers) for k in range(per_writer)
    )
    report = verify_records(records, ikm=TEST_IKM)  # links, hashes and the signed head
    assert (report.entries, report.signatures_checked) == (total, 1)
    assert stores[0].counts() == {"sessions": 1, "replay_keys": 1, "entries": total}


def test_a_stale_handle_gets_head_moved_then_reloads(open_handle: Callable[[], Any]) -> None:
    """What another handle committed is never overwritten, whatever this handle cached."""
    mine, theirs = open_handle(), open_handle()
    sid = new_session(mine)
    stale = mine.load_session(sid)
    committed = append_next(theirs, sid)
    with pytest.raises(HeadMoved):
        mine.append(
            sid,
            expected_seq=stale.head_seq,
            entry=entry_after(stale, "from-stale-view"),
            response=None,
            head_signature=HEAD_SIG,
            replay=ReplayKeys("from-stale-view"),
        )
    fresh = mine.load_session(sid, fresh=True)
    assert (fresh.head_seq, fresh.head_hash) == (0, committed["entry_hash"])
    assert not mine.seen(sid, ReplayKeys("from-stale-view"))
    append_next(mine, sid)
    assert [r["seq"] for r in theirs.iter_records(sid) if r["kind"] == "entry"] == [0, 1]


def test_racing_session_creation_has_one_winner(open_handle: Callable[[], Any]) -> None:
    stores = [open_handle() for _ in range(3)]
    sid = str(uuid.uuid4())
    results = _race(6, lambda i: new_session(stores[i % 3], sid, rid=f"hello-{i}"))
    assert sum(r is None for r in results) == 1, results
    assert all(isinstance(r, SessionRefused) for r in results if r is not None), results
    assert stores[0].counts() == {"sessions": 1, "replay_keys": 1, "entries": 0}


def test_racing_replay_records_have_one_winner(open_handle: Callable[[], Any]) -> None:
    stores = [open_handle() for _ in range(3)]
    sid = new_session(stores[0])
    results = _race(6, lambda i: stores[i % 3].record_replay(sid, ReplayKeys("once")))
    assert sum(r is None for r in results) == 1, results
    assert all(isinstance(r, ReplayDetected) for r in results if r is not None), results


# -- durability and schema ----------------------------------------------------------------


def test_data_survives_close_and_reopen(open_handle: Callable[[], Any]) -> None:
    store = open_handle()
    a, b = new_session(store, rid="ra"), new_session(store)
    for _ in range(3):
        append_next(store, a)
    append_next(store, b, close=True)
    store.record_replay(a, ReplayKeys("refused", nonce="nonce-bbbbbbbbbbbb"))
    before = snapshot(store)
    states = {s: store.load_session(s, fresh=True) for s in (a, b)}
    store.close()

    again = open_handle()
    assert snapshot(again) == before
    assert {s: again.load_session(s) for s in (a, b)} == states
    assert again.seen(a, ReplayKeys("ra")) and again.seen(a, ReplayKeys("x", "nonce-bbbbbbbbbbbb"))
    append_next(again, a)  # and the chain continues where it stopped
    assert again.load_session(a, fresh=True).head_seq == 3


def test_migrations_create_the_schema_from_empty(store: Any) -> None:
    engine = store.engine
    insp = inspect(engine)
    assert set(insp.get_table_names()) == {*metadata.tables, "alembic_version"}
    for table in metadata.sorted_tables:
        columns = {c["name"]: c for c in insp.get_columns(table.name)}
        assert list(columns) == [c.name for c in table.columns], table.name
        for col in table.columns:
            assert columns[col.name]["nullable"] == col.nullable, (table.name, col.name)
        pk = insp.get_pk_constraint(table.name)["constrained_columns"]
        assert pk == [c.name for c in table.primary_key.columns], table.name
    with engine.connect() as conn:
        assert (
            conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
            == head_revision()
        )
    indexes = {i["name"]: i for i in insp.get_indexes("entries")}
    assert indexes["uq_entries_session_step"]["unique"]
    assert indexes["uq_entries_session_step"]["column_names"] == ["session_id", "step_id"]


def test_migrating_twice_changes_nothing(open_handle: Callable[[], Any]) -> None:
    store = open_handle()
    sid = new_session(store)
    append_next(store, sid)
    before = snapshot(store)
    store.close()
    assert snapshot(open_handle()) == before  # opening migrates again (a no-op at head)


def test_ping_reaches_the_database_and_fails_once_closed(open_handle: Callable[[], Any]) -> None:
    store = open_handle()
    store.ping()
    store.close()
    with pytest.raises(StoreUnavailable):
        store.ping()


def test_iter_records_reads_one_snapshot_while_a_writer_appends(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append committed by another handle after the walk has read the session rows (a
    server writing while ``warden verify`` runs) is not half-seen, and is not blocked:
    the walk's entries and head come from one snapshot, so the chain still verifies, and
    the writer commits meanwhile. Before, PostgreSQL (READ COMMITTED) showed the new entry
    beside the old head — verify reported "signed head … does not match the recomputed
    head" (tests/scaleout's kill -9 test hit it once, the expiry worker appending during
    its final verify) — and SQLite's walk held the write lock, so the writer waited out
    its busy timeout and failed (decisions 288, 289)."""
    from warden.store.sql import SqlStore

    store, writer = open_store(database_url), open_store(database_url)
    try:
        sid = new_session(store)
        append_next(store, sid)
        real = SqlStore._session_record
        appended: list[dict[str, Any]] = []

        def session_record_then_append(s: Any) -> dict[str, Any]:
            record = real(s)
            if not appended:  # between the sessions' read and the entries' read
                appended.append(append_next(writer, sid))
            return record

        monkeypatch.setattr(SqlStore, "_session_record", staticmethod(session_record_then_append))
        records = list(store.iter_records(sid))
        monkeypatch.undo()
        assert appended  # the other handle's append committed during the walk
        entries = [r for r in records if r["kind"] == "entry"]
        (head,) = [r for r in records if r["kind"] == "head"]
        assert [e["seq"] for e in entries] == [0]
        assert (head["seq"], head["chain_hash"]) == (0, entries[-1]["entry"]["entry_hash"])
        after = [r["seq"] for r in store.iter_records(sid) if r["kind"] == "entry"]
        assert after == [0, 1]  # a new walk sees it
    finally:
        store.close()
        writer.close()
