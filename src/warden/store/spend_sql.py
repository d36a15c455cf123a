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
from typing import TYPE_CHECKING, Any

from warden.crypto.canonical import parse_strict_json
from warden.spend.budgets import Budget, BudgetKind, Period
from warden.spend.money import to_wire
from warden.spend.records import HoldStatus, Receipt, Reservation
from warden.store.agents_sql import SqlAgents
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
#: entry was chained from.
_CHAINED_APPEND = """
WITH head AS (
  UPDATE sessions SET head_seq = %(seq)s, head_hash = %(hash)s, head_signature = %(sig)s,
         closed = (closed OR %(close)s)
  WHERE session_id = %(sid)s AND head_seq = %(expected)s
  RETURNING session_id
)
INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, entry, response,
                     created_at, request, log_index)
SELECT head.session_id, %(seq)s, %(hash)s, %(step_id)s, %(step_type)s, %(entry)s,
       %(response)s, %(now)s, %(request)s, %(index)s
FROM head
"""


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

    def __init__(self, store: SqlStore, cur: Any) -> None:
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
        from warden.store.sql import _now

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
        if self._row_locks:
            self._cur.execute(
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
        return (Decimal(row[0]), Decimal(row[1])) if row is not None else (Decimal(0), Decimal(0))

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
        if not self._row_locks or store._log_tx is not None:  # noqa: SLF001
            row = self._one(sql, (session_id,))
            return (int(row[0]), row[1]) if row is not None else None
        # PostgreSQL, no leaf yet: the log counter the append will number its entry from
        # is locked and read in the same round trip, after the head (the order the
        # append took them in before, decision 681).
        from warden.store.sql import _LOG_LOCK

        client = store._client_cursor()  # noqa: SLF001 - binds the two statements' string
        try:
            bound = client.mogrify(self._q(sql), (session_id,))
        finally:
            client.close()
        self._cur.execute(bound + "; " + _LOG_LOCK)
        row = self._cur.fetchone()
        self._cur.nextset()
        store._log_tx = store._log_start(self._cur.fetchone())  # noqa: SLF001
        return (int(row[0]), row[1]) if row is not None else None

    def insert_session(self, state: SessionState) -> bool:
        """Create a Warden-authored session unless it exists; False if another writer
        (a replica) created it first — the caller then reads its head again."""
        created = self._store._insert_session(self._cur, state, if_absent=True)  # noqa: SLF001
        self.touched_sessions.add(state.session_id)
        return created

    def append(self, item: PendingAppend) -> None:
        store = self._store
        if (
            self._row_locks
            and store._log_tx is not None  # noqa: SLF001
            and not item.guards
            and item.replay is None
            and item.agent_key is None
            and item.indexed is None
        ):
            self._append_chained(item)
        else:
            store._append_one(self._cur, item)  # noqa: SLF001
        self.touched_sessions.add(item.session_id)

    def _append_chained(self, item: PendingAppend) -> None:
        """PostgreSQL, a Warden-authored entry whose leaf index is known (the counter was
        read with the head): the head move and the entry insert in one statement, one
        round trip instead of two (decision 681). The entry is inserted only if the head
        moved; the same errors as :meth:`SqlStore._append_one`."""
        from warden.errors import HeadMoved
        from warden.store.driver_errors import is_integrity
        from warden.store.sql import _EntryConflict, _now

        store = self._store
        assert store._log_tx is not None  # noqa: SLF001
        index = store._log_tx[1]  # noqa: SLF001
        seq = item.expected_seq + 1
        try:
            self._cur.execute(
                _CHAINED_APPEND,
                {
                    "seq": seq,
                    "hash": item.entry["entry_hash"],
                    "sig": _dumps(item.head_signature),
                    "close": bool(item.close),
                    "sid": item.session_id,
                    "expected": item.expected_seq,
                    "step_id": store._step_id(item),  # noqa: SLF001
                    "step_type": str(item.entry.get("step_type", "")),
                    "entry": _dumps(item.entry),
                    "response": _dumps(item.response) if item.response is not None else None,
                    "now": _now(),
                    "request": item.request,
                    "index": index,
                },
            )
        except Exception as exc:
            if is_integrity(exc):
                raise _EntryConflict(str(exc)) from exc
            raise
        if self._cur.rowcount != 1:
            raise HeadMoved(f"session {item.session_id} head is no longer seq {item.expected_seq}")
        store._log_tx[1] = index + 1  # noqa: SLF001


@contextmanager
def spend_transaction(store: SqlStore) -> Iterator[SqlSpendTx]:
    """Open one write transaction for the spend engine on ``store``."""
    with store._write(lazy=True) as cur:  # noqa: SLF001
        tx = SqlSpendTx(store, cur)
        yield tx
    for sid in tx.touched_sessions:
        store.forget_session(sid)
    tx.reported()


def list_budgets(store: SqlStore) -> list[Budget]:
    with store._write() as cur:  # noqa: SLF001 - a short read under the writer lock
        cur.execute(f"SELECT {_BUDGET_COLUMNS} FROM budgets ORDER BY budget_id")
        return [_budget(r) for r in cur.fetchall()]
