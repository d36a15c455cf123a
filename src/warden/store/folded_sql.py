"""An ACS append that carries a gate's writes (:class:`~warden.store.base.FoldedWrite`):
the approval desk's filing of a task, or its consumption of a grant, commits in the
entry's own transaction.

PostgreSQL, two round trips (issue 16 item 4, decision 640):

1. ``BEGIN``; each approval task the writes change locked (a grant consumed,
   decision 645); each Warden chain the writes append to locked and read (``SELECT
   head … FOR UPDATE``, the desk chain); the log counter locked and read; the step's
   read guards and ``absent`` guards read. Tasks before chain heads before the log
   counter: the order the desk's own transaction takes them in (its task, its chain,
   then the counter on its first leaf), so the two never deadlock.
2. The writes, run against a transaction whose cursor *records* each statement bound
   client-side instead of sending it (``mogrify``); then the log counter written back,
   the one-statement append of the entry (:data:`~warden.store.sql._PG_APPEND`), a
   check, and ``COMMIT``, all in one string. The check writes NULL into the NOT NULL
   log counter unless the entry was appended and every chain head moved to what the
   writes chained, so a lost race aborts the transaction before its ``COMMIT`` runs:
   the task, its chain entry, its outbox rows and the step's entry commit together or
   not at all, and nothing is answered before that COMMIT returned.

A write that needs a read the first round trip did not make (a recording cursor
cannot answer it) fails the append with :class:`~warden.errors.StaleRead` before
anything is sent, and so does an ``absent`` guard that no longer holds: the step is
then decided again from the database through the desk's own transaction.

SQLite (no row locks, one writer): the writes run on the append's transaction
statement by statement (:func:`write_in`).
"""

from __future__ import annotations

import json
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from warden.errors import HeadMoved, KeyRevoked, ReplayDetected, StaleRead, StoreUnavailable
from warden.store.base import FoldedWrite, NoLiveTask, PendingAppend
from warden.store.driver_errors import is_integrity
from warden.store.spend_sql import SqlSpendTx

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

#: The task states after which the desk files a new task for the same action.
_FILE_ANEW = ("consumed", "canceled")
_TASK_LOCK = "SELECT 1 FROM tasks WHERE task_id = %s FOR UPDATE"
_HEAD = "SELECT head_seq, head_hash FROM sessions WHERE session_id = %s FOR UPDATE"
_LATEST = (
    "SELECT state FROM tasks WHERE session_id = %s AND action_hash = %s "
    "ORDER BY created_at DESC, task_id DESC LIMIT 1"
)


class _NotFoldable(Exception):
    """The writes asked for a read that the first round trip did not make."""


class _Recorder:
    """A DB-API cursor look-alike that keeps each statement, bound client-side, for
    one later round trip. Every write is assumed to touch its row (``rowcount`` 1):
    the transaction's final check refuses the commit otherwise. Reads raise."""

    rowcount = 1

    def __init__(self, client: Any) -> None:
        self._client = client
        self.statements: list[str] = []

    def execute(self, sql: str, params: Any = None) -> None:
        if sql.lstrip()[:6].upper() == "SELECT":
            raise _NotFoldable(sql)
        self.statements.append(self._client.mogrify(sql, params or None))

    def executemany(self, sql: str, rows: Any) -> None:
        for row in rows:
            self.execute(sql, row)

    def fetchone(self) -> Any:
        raise _NotFoldable("fetchone")

    def fetchall(self) -> Any:
        raise _NotFoldable("fetchall")


class _FoldedTx(SqlSpendTx):
    """The desk's transaction inside the append's: chain heads from the first round
    trip, every write recorded (:class:`_Recorder`)."""

    def __init__(
        self, store: SqlStore, cur: _Recorder, heads: dict[str, tuple[int, str | None] | None]
    ) -> None:
        super().__init__(store, cur)
        self._heads = heads
        #: session id → the entry hash its head must hold at COMMIT.
        self.moved: dict[str, str] = {}

    def session_head(self, session_id: str) -> tuple[int, str | None] | None:
        if session_id not in self._heads:
            raise _NotFoldable(f"chain {session_id} was not locked first")
        return self._heads[session_id]

    def append(self, item: PendingAppend) -> None:
        from warden.store.sql import INSERT_ENTRY, entry_row, head_move_row

        store = self._store
        assert store._log_tx is not None  # noqa: SLF001 - read in the first round trip
        index = store._log_tx[1]  # noqa: SLF001
        move, values = head_move_row(item)
        self._cur.execute(move.replace("?", "%s"), values)
        self._cur.execute(INSERT_ENTRY.replace("?", "%s"), entry_row(item, item.response, index))
        store._log_tx[1] = index + 1  # noqa: SLF001
        self.moved[item.session_id] = item.entry["entry_hash"]
        self.touched_sessions.add(item.session_id)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _check_absent(rows: list[Any], absent: tuple[NoLiveTask, ...]) -> None:
    for row, guard in zip(rows, absent, strict=True):
        if row is not None and str(row[0]) not in _FILE_ANEW:
            raise StaleRead(f"a task for action {guard.action_hash} exists since it was read")


def write_in(store: SqlStore, cur: Any, item: PendingAppend) -> None:
    """The writes of ``item`` on the append's open transaction, statement by statement
    (SQLite: ``BEGIN IMMEDIATE`` already made it the only writer). StaleRead if an
    ``absent`` guard no longer holds."""
    folded = item.folded
    assert folded is not None
    rows = []
    for guard in folded.absent:
        cur.execute(store._q(_LATEST.replace("%s", "?")), (guard.scope, guard.action_hash))  # noqa: SLF001
        rows.append(cur.fetchone())
    _check_absent(rows, folded.absent)
    tx = SqlSpendTx(store, cur)
    folded.write(tx)
    for sid in tx.touched_sessions:
        store.forget_session(sid)


def append_folded(store: SqlStore, item: PendingAppend) -> Exception | None:
    """PostgreSQL: ``item`` and its folded writes in two round trips (module doc). The
    error it returns has written nothing; ``None`` once COMMIT returned."""
    from warden.store.sql import _LOG_LOCK, _PG_APPEND, pg_append_params
    from warden.timestamps import utc_micros as _now

    folded: FoldedWrite | None = item.folded
    assert folded is not None
    with store._lock:  # noqa: SLF001 - the store's one writing connection
        cur = store._cursor(absorb=True)  # noqa: SLF001
        both = store._client_cursor()  # noqa: SLF001
        begun = sent = False
        tx: _FoldedTx | None = None
        try:
            # With the end of a transaction a failed read guard left open (the
            # resubmission of a grant approved on another replica, decision 821).
            sql, skip = store._begin()  # noqa: SLF001
            args: list[Any] = []
            for task_id in folded.locks:
                sql += "; " + _TASK_LOCK
                args.append(task_id)
            for sid in folded.chains:
                sql += "; " + _HEAD
                args.append(sid)
            sql += "; " + _LOG_LOCK
            for guard in item.guards:
                sql += "; SELECT updated_at FROM tasks WHERE task_id = %s"
                args.append(guard.task_id)
            for absent in folded.absent:
                sql += "; " + _LATEST
                args += [absent.scope, absent.action_hash]
            sent = True  # from here a failure rolls back what the server began (decision 823)
            both.execute(sql, args)
            begun = True
            for _ in range(skip):
                both.nextset()  # past that end's result, to BEGIN's
            for _ in folded.locks:
                both.nextset()  # locked; the read guards check the row after the locks
            heads: dict[str, tuple[int, str | None] | None] = {}
            for sid in folded.chains:
                both.nextset()
                row = both.fetchone()
                heads[sid] = (int(row[0]), row[1]) if row is not None else None
            both.nextset()
            store._log_tx = store._log_start(both.fetchone())  # noqa: SLF001
            for guard in item.guards:
                both.nextset()
                row = both.fetchone()
                if row is None or str(row[0]) != guard.updated_at:
                    raise StaleRead(f"approval task {guard.task_id} changed since it was read")
            rows = []
            for _ in folded.absent:
                both.nextset()
                rows.append(both.fetchone())
            _check_absent(rows, folded.absent)

            recorder = _Recorder(both)
            tx = _FoldedTx(store, recorder, heads)
            folded.write(tx)
            flush = store._log_flush().strip().rstrip(";")  # noqa: SLF001
            index = store._log_tx[1]  # noqa: SLF001
            response = item.indexed(index) if item.indexed is not None else item.response
            append = both.mogrify(_PG_APPEND, pg_append_params(item, response, _now()))
            moved = "".join(
                both.mogrify(
                    " AND EXISTS (SELECT 1 FROM sessions WHERE session_id = %s AND head_hash = %s)",
                    (sid, digest),
                )
                for sid, digest in tx.moved.items()
            )
            check = (
                f"UPDATE log_state SET next_index = CASE WHEN next_index = {int(index) + 1}"
                f"{moved} THEN next_index ELSE NULL END WHERE id = 1"
            )
            both.execute(
                "; ".join([*recorder.statements, *([flush] if flush else []), append, check])
                + "; COMMIT"
            )
        except (StaleRead, _NotFoldable) as exc:
            if begun:
                store._rollback(cur)  # noqa: SLF001
            return exc if isinstance(exc, StaleRead) else StaleRead(f"not foldable: {exc}")
        except Exception as exc:
            if sent:
                with suppress(Exception):  # a dropped connection has nothing to undo
                    store._rollback(cur)  # noqa: SLF001
            if not begun or not store._broken():  # noqa: SLF001
                if is_integrity(exc):
                    return _classify(store, item, exc)
                raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
            # The connection dropped: everything committed or nothing did; the entry
            # row (its hash is unique to this append) says which.
            lost = store._after_lost_append(item, exc)  # noqa: SLF001
            if lost is None:
                _committed(store, folded, tx.touched_sessions if tx is not None else set())
            return lost
        finally:
            store._log_tx = None  # noqa: SLF001
            both.close()
            cur.close()
    assert tx is not None
    _committed(store, folded, tx.touched_sessions)
    return None


def _committed(store: SqlStore, folded: FoldedWrite, touched: set[str]) -> None:
    for sid in touched:
        store.forget_session(sid)
    folded.committed()


def _classify(store: SqlStore, item: PendingAppend, exc: Exception) -> Exception:
    """Why the second round trip failed, after its rollback: a duplicate replay key; the
    check (the entry was not appended: the agent key was revoked or the head moved); any
    other constraint (a chain race) is a stale read, decided again from the database."""
    from warden.store.sql import _REFUSED, chained_request_id

    diag = getattr(exc, "diag", None)
    if getattr(diag, "constraint_name", None) == "pk_replay_keys":
        return ReplayDetected("duplicate request_id or nonce")
    if getattr(diag, "column_name", None) == "next_index":
        chained = chained_request_id(item)
        if chained is not None and store._read(  # noqa: SLF001
            _REFUSED, (item.session_id, chained)
        ):
            return ReplayDetected("duplicate request_id or nonce")
        if item.agent_key is not None:
            live = store._read(  # noqa: SLF001
                "SELECT 1 FROM agent_keys k JOIN agents a ON a.agent_id = k.agent_id "
                "WHERE k.key_id = ? AND k.revoked_at IS NULL AND a.revoked_at IS NULL",
                (item.agent_key,),
            )
            if live is None:
                return KeyRevoked("the agent key that signed this request is revoked")
        head = store._read(  # noqa: SLF001
            "SELECT head_seq FROM sessions WHERE session_id = ?", (item.session_id,)
        )
        if head is None or int(head[0]) != item.expected_seq:
            return HeadMoved(f"session {item.session_id} head is no longer seq {item.expected_seq}")
    stale = StaleRead("a chain the folded writes append to moved; deciding again")
    stale.__cause__ = exc
    return stale
