"""SQL for the spend engine: one write transaction (:class:`SqlSpendTx`) per operation.

Implements :class:`warden.spend.engine.SpendTx` on the store's write connection
(SQLite ``BEGIN IMMEDIATE``: the cap check and the hold are one serialised
step). Amounts are stored as decimal strings and read back as ``Decimal``;
reservation and receipt records are JSON beside the columns that are queried. Who owns a
hold is its ``principal`` column (set at insert, never updated); who may spend a budget,
its ``principals`` column (a JSON list).
The same transaction carries the idempotency keys and tasks tables
(:attr:`SqlSpendTx.idempotency_keys`, :attr:`SqlSpendTx.tasks`), so a spend
wire mutation commits together with its idempotency claim and stored answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

from warden.crypto.canonical import parse_strict_json
from warden.errors import HeadMoved
from warden.spend.budgets import Budget, BudgetKind, Period
from warden.spend.money import to_wire
from warden.spend.records import HoldStatus, Receipt, Reservation
from warden.store.agents_sql import SqlAgents
from warden.store.append_sql import LEAF_AND_ENTRY
from warden.store.base import PendingAppend, SessionState
from warden.store.idempotency_sql import SqlIdempotencyKeys
from warden.store.kla_sql import SqlKlaRecords
from warden.store.outbox_sql import SqlOutbox
from warden.store.tasks_sql import SqlTasks

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

log = logging.getLogger(__name__)


#: PostgreSQL: a Warden-authored chain's head moved and its entry inserted in one
#: statement (:meth:`SqlSpendTx._append_chained`); no row unless the head was where the
#: entry was chained from (its seq and its hash, decision 801).
_CHAINED_APPEND = """
WITH head AS (
  UPDATE sessions SET head_seq = %(seq)s, head_hash = %(hash)s, head_signature = %(sig)s,
         closed = (closed OR %(close)s)
  WHERE session_id = %(sid)s AND head_seq = %(expected)s
        AND head_hash IS NOT DISTINCT FROM %(prev)s
  RETURNING session_id
)
INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, entry, response,
                     created_at, request, log_index)
SELECT head.session_id, %(seq)s, %(hash)s, %(step_id)s, %(step_type)s, %(entry)s,
       %(response)s, %(now)s, %(request)s, %(index)s
FROM head
"""


#: PostgreSQL: the same with the entry numbered by the log counter in the statement
#: itself (as :data:`~warden.store.sql._PG_APPEND` does), for a transaction that has not
#: read the counter: the counter is locked by this statement, not before it.
_CHAINED_APPEND_LEAF = (
    """
WITH lk AS (
  SELECT next_index FROM log_state WHERE id = 1 FOR UPDATE
), head AS (
  UPDATE sessions SET head_seq = %(seq)s, head_hash = %(hash)s, head_signature = %(sig)s,
         closed = (closed OR %(close)s)
  WHERE session_id = %(sid)s AND head_seq = %(expected)s
        AND head_hash IS NOT DISTINCT FROM %(prev)s AND EXISTS (SELECT 1 FROM lk)
  RETURNING session_id
)
"""
    + LEAF_AND_ENTRY
)

_HEAD_LOCK = "SELECT head_seq, head_hash FROM sessions WHERE session_id = %s FOR UPDATE"

#: PostgreSQL: a chain's head read without a lock, with ``BEGIN`` (decision 800).
_HEAD_READ = "SELECT head_seq, head_hash FROM sessions WHERE session_id = %s"

#: PostgreSQL: the head an entry was chained on, read without a lock, locked just before
#: the entry's append (in the transaction's next round trip): under READ COMMITTED it
#: waits for a writer holding it, then locks nothing if that writer moved it, and the
#: append that follows inserts nothing (decision 800).
_HEAD_LOCK_AT = "SELECT 1 FROM sessions WHERE session_id = %s AND head_seq = %s FOR UPDATE"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _reservation_record(r: Reservation) -> dict[str, Any]:
    return {
        "id": r.id,
        "budget_id": r.budget_id,
        "path": list(r.path),
        "buckets": list(r.buckets),
        "currency": r.currency,
        "amount": to_wire(r.amount),
        "action": r.action,
        "status": r.status.value,
        "created_at": r.created_at.isoformat(),
        "expires_at": r.expires_at.isoformat(),
        "settled_amount": to_wire(r.settled_amount) if r.settled_amount is not None else None,
        "receipt_id": r.receipt_id,
        "reason": r.reason,
        "meta": r.meta,
    }


def _reservation(rec: dict[str, Any], principal: str | None) -> Reservation:
    return Reservation(
        id=rec["id"],
        budget_id=rec["budget_id"],
        path=tuple(rec["path"]),
        buckets=tuple(rec["buckets"]),
        currency=rec["currency"],
        amount=Decimal(rec["amount"]),
        action=rec["action"],
        status=HoldStatus(rec["status"]),
        created_at=datetime.fromisoformat(rec["created_at"]),
        expires_at=datetime.fromisoformat(rec["expires_at"]),
        settled_amount=Decimal(rec["settled_amount"]) if rec["settled_amount"] else None,
        receipt_id=rec["receipt_id"],
        reason=rec["reason"],
        meta=rec.get("meta") or {},
        principal=principal,
    )


def _receipt_record(r: Receipt) -> dict[str, Any]:
    return {
        "id": r.id,
        "reservation_id": r.reservation_id,
        "budget_id": r.budget_id,
        "action": r.action,
        "currency": r.currency,
        "amount": to_wire(r.amount),
        "created_at": r.created_at.isoformat(),
        "undone_at": r.undone_at.isoformat() if r.undone_at else None,
        "resources": list(r.resources),
    }


def _receipt(rec: dict[str, Any], principal: str | None) -> Receipt:
    return Receipt(
        id=rec["id"],
        reservation_id=rec["reservation_id"],
        budget_id=rec["budget_id"],
        action=rec["action"],
        currency=rec["currency"],
        amount=Decimal(rec["amount"]),
        created_at=datetime.fromisoformat(rec["created_at"]),
        undone_at=datetime.fromisoformat(rec["undone_at"]) if rec["undone_at"] else None,
        resources=tuple(rec.get("resources") or ()),
        principal=principal,
    )


def _budget(row: Any) -> Budget:
    return Budget(
        id=row[0],
        kind=BudgetKind(row[1]),
        parent_id=row[2],
        currency=row[3],
        cap=Decimal(row[4]),
        period=Period(row[5]),
        name=row[6],
        principals=tuple(parse_strict_json(row[7])),
    )


_BUDGET_COLUMNS = "budget_id, kind, parent_id, currency, cap, period, name, principals"


class SqlSpendTx:
    """The spend engine's view of one open write transaction."""

    def __init__(self, store: SqlStore, cur: Any, *, unlocked_heads: bool = False) -> None:
        from warden.store.sql import _LazyBegin

        self._store = store
        self._cur = cur
        self._q = store._q  # noqa: SLF001 - same package, same connection
        self.touched_sessions: set[str] = set()
        self._row_locks = store.row_locks
        self._for_update = " FOR UPDATE" if store.row_locks else ""
        # Rows that commit with the spend operation: an idempotency claim and its
        # stored response, a task (the spend wire, warden.wire.spend).
        self.idempotency_keys = SqlIdempotencyKeys(
            cur, self._q, store=store if store.row_locks else None
        )
        self.tasks = SqlTasks(cur, self._q, row_locks=store.row_locks)
        self._after_commit: list[Callable[[], None]] = []
        #: Budgets read in this transaction, by id (None: no such budget). An operation
        #: reads a budget more than once (its owner check, then its policy and hold);
        #: this transaction is the only writer of what it read back (``put_budget``
        #: drops the entry), so the second read is answered here: one round trip less
        #: on PostgreSQL (decision 680).
        self._budgets: dict[str, Budget | None] = {}
        #: PostgreSQL: the heads of the chains this transaction holds locked, as this
        #: transaction leaves them (it is their only writer until it ends).
        self._held: dict[str, tuple[int, str | None]] = {}
        #: PostgreSQL: usage rows this transaction holds locked (read ``FOR UPDATE``),
        #: as this transaction leaves them: a second read is answered here (decision
        #: 701; only this class writes ``budget_usage``).
        self._usage: dict[tuple[str, str], tuple[Decimal, Decimal]] = {}
        #: PostgreSQL, a transaction opened with ``unlocked_heads``: chain heads read
        #: without a lock with ``BEGIN`` (None: no chain yet), not yet asked for (decision
        #: 800), and the chains whose next entry is chained on such a read.
        self._unlocked_heads = unlocked_heads and isinstance(cur, _LazyBegin)
        self._seen: dict[str, tuple[int, str | None] | None] = {}
        self._racing: set[str] = set()

    def prefetch(
        self,
        *,
        budgets: tuple[str, ...] = (),
        chains: tuple[str, ...] = (),
        usage: tuple[tuple[str, str], ...] = (),
        heads: tuple[str, ...] = (),
    ) -> None:
        """PostgreSQL: read ``budgets`` and lock and read the heads of the Warden chains
        ``chains`` with this transaction's ``BEGIN`` (no round trip of their own,
        decision 700); a later :meth:`budget` or :meth:`session_head` of one of them is
        answered from what was read. Only a hint: nothing is read once the transaction
        has begun (nor on SQLite), and a read that was not prefetched is made when asked.
        ``usage``: (budget, bucket) rows locked and read (a row that does not exist yet
        is created and read when asked, as before). Usage rows, then chain heads, are
        locked in the order given, before anything else this transaction locks (the
        order an operation takes them in: its cap check, then its entries).

        ``heads``: chains whose heads are read WITHOUT a lock, in a transaction opened
        with ``unlocked_heads`` (else ignored): an entry chained on one locks the head
        in the round trip that appends it, where the operation's lock order puts it,
        and if another writer moved it meanwhile the commit fails with
        :class:`~warden.errors.UnlockedHeadMoved` and nothing is written (decision
        800)."""
        from warden.store.sql import _LazyBegin

        cur = self._cur
        if not isinstance(cur, _LazyBegin):
            return
        for budget_id in budgets:
            if budget_id not in self._budgets:
                cur.prefetch(
                    f"SELECT {_BUDGET_COLUMNS} FROM budgets WHERE budget_id = %s",
                    (budget_id,),
                    partial(self._prefetched_budget, budget_id),
                )
        for row_key in usage:
            if row_key not in self._usage:
                cur.prefetch(
                    "SELECT reserved, settled FROM budget_usage "
                    "WHERE budget_id = %s AND bucket = %s FOR UPDATE",
                    row_key,
                    partial(self._prefetched_usage, row_key),
                )
        for sid in chains:
            cur.prefetch(_HEAD_LOCK, (sid,), partial(self._locked_head, sid))
        if self._unlocked_heads:
            for sid in heads:
                if sid not in chains:
                    cur.prefetch(_HEAD_READ, (sid,), partial(self._seen_head, sid))

    def _seen_head(self, session_id: str, row: Any) -> None:
        self._seen[session_id] = (int(row[0]), row[1]) if row is not None else None

    def _prefetched_usage(self, row_key: tuple[str, str], row: Any) -> None:
        if row is not None:  # locked: this transaction's until it ends
            self._usage[row_key] = (Decimal(row[0]), Decimal(row[1]))

    def _prefetched_budget(self, budget_id: str, row: Any) -> None:
        self._budgets[budget_id] = _budget(row) if row is not None else None

    def prefetch_read(
        self, sql: str, params: tuple[Any, ...], receive: Callable[[Any], object]
    ) -> bool:
        """PostgreSQL: send the read ``sql`` (qmark style) with this transaction's
        ``BEGIN`` and hand its first row (or None) to ``receive`` then; False (nothing
        will be sent) once the transaction has begun, or on SQLite."""
        from warden.store.sql import _LazyBegin

        cur = self._cur
        return isinstance(cur, _LazyBegin) and cur.prefetch(self._q(sql), params, receive)

    def read_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        """The first row of the read ``sql`` (qmark style) in this transaction, or None."""
        return self._one(sql, params)

    def _locked_head(self, session_id: str, row: Any) -> tuple[int, str | None] | None:
        """Remember the head of a chain this transaction just locked (None: no chain)."""
        if row is None:
            return None
        head = (int(row[0]), row[1])
        self._held[session_id] = head
        return head

    def after_commit(self, report: Callable[[], None]) -> None:
        """Run ``report`` once this transaction has committed (never if it rolls back):
        the decision pipeline's observers (metrics, traces) see only what is durable.
        Reports run in the order given; one that raises is logged and the rest still run
        (the change is committed: its answer must still go out)."""
        self._after_commit.append(report)

    def reported(self) -> None:
        """Run the reports of :meth:`after_commit` (called once, after COMMIT)."""
        reports, self._after_commit = self._after_commit, []
        for report in reports:
            try:
                report()
            except Exception:  # noqa: BLE001 - an observer never undoes a committed change
                log.exception("a report after commit failed")

    @property
    def cursor(self) -> Any:
        """The DB-API cursor of this transaction (for the ``*_sql`` tables that take one)."""
        return self._cur

    def log_event(self, kind: str, detail: dict[str, Any]) -> int:
        """Append a transparency-log leaf that is no chain entry; its index."""
        return self._store.append_log_event(self._cur, kind, detail)  # noqa: SLF001

    @property
    def outbox(self) -> SqlOutbox:
        """The webhook outbox in this transaction: a task change and its notifications
        commit together (:meth:`warden.approvals.notifier.Notifier.enqueue`)."""
        return SqlOutbox(self._cur, self._q)

    @property
    def agents(self) -> SqlAgents:
        """The agent registry in this transaction: a change and its audit entry commit
        together (:mod:`warden.identity.agents`)."""
        return SqlAgents(self._cur, self._q)

    @property
    def kla(self) -> SqlKlaRecords:
        """The KLA records in this transaction: an action request, its decision, its
        approval task and their audit entries commit together (:mod:`warden.wire.kla`)."""
        return SqlKlaRecords(self._cur, self._q)

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        self._cur.execute(self._q(sql), params)
        return self._cur.fetchone()

    # budgets
    def budget(self, budget_id: str) -> Budget | None:
        if budget_id in self._budgets:
            return self._budgets[budget_id]
        row = self._one(f"SELECT {_BUDGET_COLUMNS} FROM budgets WHERE budget_id = ?", (budget_id,))
        found = _budget(row) if row is not None else None
        self._budgets[budget_id] = found
        return found

    def put_budget(self, budget: Budget) -> bool:
        """Create or update ``budget``; False when the stored row already says exactly this
        (nothing written). An upsert whose update only fires on a difference: replicas
        loading the same budgets file at once write, and audit, each change once."""
        from warden.timestamps import utc_micros as _now

        self._budgets.pop(budget.id, None)
        self._cur.execute(
            self._q(
                "INSERT INTO budgets (budget_id, kind, parent_id, currency, cap, period, name, "
                "principals, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (budget_id) DO UPDATE "
                "SET kind = excluded.kind, parent_id = excluded.parent_id, "
                "currency = excluded.currency, cap = excluded.cap, period = excluded.period, "
                "name = excluded.name, principals = excluded.principals, "
                "updated_at = excluded.updated_at "
                "WHERE budgets.kind <> excluded.kind OR budgets.currency <> excluded.currency "
                "OR COALESCE(budgets.parent_id, '') <> COALESCE(excluded.parent_id, '') "
                "OR budgets.cap <> excluded.cap OR budgets.period <> excluded.period "
                "OR budgets.name <> excluded.name OR budgets.principals <> excluded.principals"
            ),
            (
                budget.id,
                budget.kind.value,
                budget.parent_id,
                budget.currency,
                to_wire(budget.cap),
                budget.period.value,
                budget.name,
                _dumps(list(budget.principals)),  # normalized by Budget: one text per set
                _now(),
            ),
        )
        return bool(self._cur.rowcount == 1)

    def usage(self, budget_id: str, bucket: str) -> tuple[Decimal, Decimal]:
        """(reserved, settled) of one bucket. On PostgreSQL the row is created if absent
        and locked until the transaction ends, so two replicas' cap checks on one budget
        run one after the other (SQLite's ``BEGIN IMMEDIATE`` already serialises them)."""
        if (budget_id, bucket) in self._usage:  # locked by this transaction (decision 701)
            return self._usage[(budget_id, bucket)]
        if self._row_locks:
            # Sent with the read after it (decision 701): nothing reads its result.
            (getattr(self._cur, "defer", None) or self._cur.execute)(
                self._q(
                    "INSERT INTO budget_usage (budget_id, bucket, reserved, settled) "
                    "VALUES (?, ?, '0', '0') ON CONFLICT (budget_id, bucket) DO NOTHING"
                ),
                (budget_id, bucket),
            )
        row = self._one(
            "SELECT reserved, settled FROM budget_usage WHERE budget_id = ? AND bucket = ?"
            + self._for_update,
            (budget_id, bucket),
        )
        found = (Decimal(row[0]), Decimal(row[1])) if row is not None else (Decimal(0), Decimal(0))
        if self._row_locks:
            self._usage[(budget_id, bucket)] = found
        return found

    def set_usage(self, budget_id: str, bucket: str, reserved: Decimal, settled: Decimal) -> None:
        if reserved < 0 or settled < 0:
            raise AssertionError(f"usage of {budget_id}/{bucket} would go negative")
        self._cur.execute(
            self._q(
                "INSERT INTO budget_usage (budget_id, bucket, reserved, settled) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (budget_id, bucket) DO UPDATE "
                "SET reserved = excluded.reserved, settled = excluded.settled"
            ),
            (budget_id, bucket, to_wire(reserved), to_wire(settled)),
        )
        if self._row_locks:
            self._usage[(budget_id, bucket)] = (
                Decimal(to_wire(reserved)),
                Decimal(to_wire(settled)),
            )

    # reservations and receipts
    def reservation(self, reservation_id: str) -> Reservation | None:
        row = self._one(
            "SELECT record, principal FROM reservations WHERE reservation_id = ?"
            + self._for_update,
            (reservation_id,),
        )
        return _reservation(parse_strict_json(row[0]), row[1]) if row is not None else None

    def put_reservation(self, r: Reservation) -> None:
        # The owner column is written once, at insert: a later update never changes it.
        self._cur.execute(
            self._q(
                "INSERT INTO reservations (reservation_id, budget_id, status, expires_at, record, "
                "principal) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (reservation_id) DO UPDATE "
                "SET budget_id = excluded.budget_id, status = excluded.status, "
                "expires_at = excluded.expires_at, record = excluded.record"
            ),
            (
                r.id,
                r.budget_id,
                r.status.value,
                r.expires_at.isoformat(),
                _dumps(_reservation_record(r)),
                r.principal,
            ),
        )

    def due_reservations(self, now: datetime) -> list[Reservation]:
        # expires_at is ISO 8601 UTC with a fixed offset, so text order is time order.
        # PostgreSQL: the rows are locked, and rows another replica is expiring (or
        # settling) right now are skipped, so no hold is released twice.
        self._cur.execute(
            self._q(
                "SELECT record, principal FROM reservations WHERE status = 'held' AND "
                "expires_at <= ? ORDER BY expires_at"
                + (" FOR UPDATE SKIP LOCKED" if self._row_locks else "")
            ),
            (now.isoformat(),),
        )
        return [_reservation(parse_strict_json(r[0]), r[1]) for r in self._cur.fetchall()]

    def receipt(self, receipt_id: str) -> Receipt | None:
        row = self._one(
            "SELECT record, principal FROM receipts WHERE receipt_id = ?" + self._for_update,
            (receipt_id,),
        )
        return _receipt(parse_strict_json(row[0]), row[1]) if row is not None else None

    def put_receipt(self, r: Receipt) -> None:
        self._cur.execute(
            self._q(
                "INSERT INTO receipts (receipt_id, reservation_id, record, principal) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (receipt_id) DO UPDATE "
                "SET reservation_id = excluded.reservation_id, record = excluded.record"
            ),
            (r.id, r.reservation_id, _dumps(_receipt_record(r)), r.principal),
        )

    # audit chain primitives (the chaining itself is the ledger's)
    def session_head(self, session_id: str) -> tuple[int, str | None] | None:
        # Locked on PostgreSQL: the caller appends next, and a second replica appending
        # to this Warden-authored session waits here instead of losing the head race.
        sql = "SELECT head_seq, head_hash FROM sessions WHERE session_id = ?" + self._for_update
        store = self._store
        if not self._row_locks:
            row = self._one(sql, (session_id,))
            return (int(row[0]), row[1]) if row is not None else None
        if session_id in self._held:  # locked by this transaction: it is the only writer
            return self._held[session_id]
        if session_id in self._seen:
            # Read without a lock with BEGIN: the entry chained on it locks it when it is
            # appended, and the commit fails if it moved meanwhile (decision 800).
            self._racing.add(session_id)
            return self._seen.pop(session_id)
        from warden.store.sql import _LOG_LOCK, _LazyBegin

        if isinstance(self._cur, _LazyBegin) or store._log_tx is not None:  # noqa: SLF001
            # The append numbers its entry itself (decision 701), or the counter is read.
            return self._locked_head(session_id, self._one(sql, (session_id,)))
        # No leaf yet: the log counter the append will number its entry from is locked
        # and read in the same round trip, after the head (decision 681).
        client = store._client_cursor()  # noqa: SLF001 - binds the two statements' string
        try:
            bound = client.mogrify(self._q(sql), (session_id,))
        finally:
            client.close()
        self._cur.execute(bound + "; " + _LOG_LOCK)
        row = self._cur.fetchone()
        self._cur.nextset()
        store._log_tx = store._log_start(self._cur.fetchone())  # noqa: SLF001
        return self._locked_head(session_id, row)

    def insert_session(self, state: SessionState) -> bool:
        """Create a Warden-authored session unless it exists; False if another writer
        (a replica) created it first — the caller then reads its head again."""
        from warden.store.sql import _LazyBegin

        sid = state.session_id
        if sid in self._racing and isinstance(self._cur, _LazyBegin):
            # Read as absent without a lock (decision 800): created with the entry, in
            # the last round trip. A replica that created it first leaves the append's
            # head (-1) not found, and the commit fails with UnlockedHeadMoved.
            self._cur.defer(*self._store._insert_session_sql(state, if_absent=True))  # noqa: SLF001
            self.touched_sessions.add(sid)
            return True
        created = self._store._insert_session(self._cur, state, if_absent=True)  # noqa: SLF001
        self.touched_sessions.add(state.session_id)
        if created and self._row_locks:  # the new row is this transaction's until it ends
            self._held[state.session_id] = (state.head_seq, state.head_hash)
        return created

    def append(self, item: PendingAppend) -> None:
        from warden.store.sql import _LazyBegin

        store = self._store
        simple = (
            self._row_locks
            and not item.guards
            and item.replay is None
            and item.agent_key is None
            and item.indexed is None
        )
        head = self._held.get(item.session_id)
        racing = item.session_id in self._racing
        cur = self._cur
        if simple and isinstance(cur, _LazyBegin) and (head is not None or racing):
            if racing:  # chained on a head read without a lock: locked here, last
                self._racing.discard(item.session_id)
                cur.defer(_HEAD_LOCK_AT, (item.session_id, item.expected_seq))
                cur.unlocked = True
            elif head is not None and head[0] != item.expected_seq:
                raise HeadMoved(
                    f"session {item.session_id} head is no longer seq {item.expected_seq}"
                )
            self._append_deferred(cur, item)
        elif simple and store._log_tx is not None:  # noqa: SLF001
            self._append_chained(item)
        else:
            store._append_one(self._cur, item)  # noqa: SLF001
        if self._row_locks:
            self._held[item.session_id] = (item.expected_seq + 1, item.entry["entry_hash"])
        self.touched_sessions.add(item.session_id)

    def _params(self, item: PendingAppend) -> dict[str, Any]:
        from warden.timestamps import utc_micros as _now

        return {
            "seq": item.expected_seq + 1,
            "hash": item.entry["entry_hash"],
            "sig": _dumps(item.head_signature),
            "close": bool(item.close),
            "sid": item.session_id,
            "expected": item.expected_seq,
            # The head's hash too, not only its seq: a transaction's second entry on a
            # chain is chained on its first, which did not land if the head it read
            # without a lock had moved — and another writer's entry may sit at that seq.
            "prev": item.entry.get("previous_hash"),
            "step_id": self._store._step_id(item),  # noqa: SLF001
            "step_type": str(item.entry.get("step_type", "")),
            "entry": _dumps(item.entry),
            "response": _dumps(item.response) if item.response is not None else None,
            "now": _now(),
            "request": item.request,
        }

    def _append_deferred(self, cur: Any, item: PendingAppend) -> None:
        """PostgreSQL, a Warden-authored entry on a chain whose head this transaction
        locked at ``item.expected_seq``: the head move and the entry, one statement, sent
        with the transaction's next statement or its ``COMMIT`` (decision 701). Nobody
        else can move the head, so it moves; ``COMMIT`` is refused if it did not. The
        entry is numbered by the counter in the statement unless this transaction
        already read the counter (then from the count kept in memory)."""
        store = self._store
        params = self._params(item)
        if store._log_tx is None:  # noqa: SLF001
            cur.defer(_CHAINED_APPEND_LEAF, params, item.session_id, item.entry["entry_hash"])
            return
        index = store._log_tx[1]  # noqa: SLF001
        params["index"] = index
        cur.defer(_CHAINED_APPEND, params, item.session_id, item.entry["entry_hash"])
        store._log_tx[1] = index + 1  # noqa: SLF001

    def _append_chained(self, item: PendingAppend) -> None:
        """PostgreSQL, a Warden-authored entry whose leaf index is known (the counter was
        read with the head): the head move and the entry insert in one statement, one
        round trip instead of two (decision 681). The entry is inserted only if the head
        moved; the same errors as :meth:`SqlStore._append_one`."""
        from warden.store.driver_errors import is_integrity
        from warden.store.sql import _EntryConflict

        store = self._store
        assert store._log_tx is not None  # noqa: SLF001
        index = store._log_tx[1]  # noqa: SLF001
        params = self._params(item)
        params["index"] = index
        try:
            self._cur.execute(_CHAINED_APPEND, params)
        except Exception as exc:
            if is_integrity(exc):
                raise _EntryConflict(str(exc)) from exc
            raise
        if self._cur.rowcount != 1:
            raise HeadMoved(f"session {item.session_id} head is no longer seq {item.expected_seq}")
        store._log_tx[1] = index + 1  # noqa: SLF001


@contextmanager
def spend_transaction(store: SqlStore, *, unlocked_heads: bool = False) -> Iterator[SqlSpendTx]:
    """Open one write transaction for the spend engine on ``store``; ``unlocked_heads``:
    it may chain on heads :meth:`SqlSpendTx.prefetch` read without a lock (decision 800;
    the caller runs it through :func:`~warden.ledger.warden_chain.chained_attempts`)."""
    with store._write(lazy=True) as cur:  # noqa: SLF001
        tx = SqlSpendTx(store, cur, unlocked_heads=unlocked_heads)
        yield tx
    for sid in tx.touched_sessions:
        store.forget_session(sid)
    tx.reported()


def list_budgets(store: SqlStore) -> list[Budget]:
    with store._write() as cur:  # noqa: SLF001 - a short read under the writer lock
        cur.execute(f"SELECT {_BUDGET_COLUMNS} FROM budgets ORDER BY budget_id")
        return [_budget(r) for r in cur.fetchall()]
