"""The spend engine: reserve → settle | release, expiry and undo, never overspending.

Every operation runs in one store transaction that serialises writers (SQLite
``BEGIN IMMEDIATE``; row locks on PostgreSQL), so checking a cap and taking the
hold are one atomic step: there is no window in which two requests both see
room for one. Each operation — including a refused reservation or a refused
settlement — appends a ``warden/spend.*`` entry to the audit chain of the
budget tree (one chain per org budget) in the same transaction.

Amounts are Decimal end to end; a reservation holds its amount against every
budget from the agent's to the org's, in each budget's current period bucket,
and settles or releases in those same buckets.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from warden.spend.audit import AuditTx, SpendAuditor
from warden.spend.budgets import Budget, period_key
from warden.spend.errors import (
    AlreadyUndone,
    BudgetExceeded,
    ReservationNotHeld,
    SettlementExceedsReservation,
    SpendError,
    UnknownBudget,
    UnknownReceipt,
    UnknownReservation,
)
from warden.spend.money import MoneyError, parse_amount, to_wire
from warden.spend.records import HoldStatus, Receipt, Reservation

DEFAULT_HOLD_SECONDS = 900
MAX_HOLD_SECONDS = 7 * 24 * 3600


class SpendTx(AuditTx, Protocol):
    """What the engine needs inside one write transaction (implemented by the store)."""

    def budget(self, budget_id: str) -> Budget | None: ...

    def put_budget(self, budget: Budget) -> bool: ...

    def usage(self, budget_id: str, bucket: str) -> tuple[Decimal, Decimal]:
        """(reserved, settled) in a period bucket; zeros when unused."""
        ...

    def set_usage(
        self, budget_id: str, bucket: str, reserved: Decimal, settled: Decimal
    ) -> None: ...

    def reservation(self, reservation_id: str) -> Reservation | None: ...

    def put_reservation(self, reservation: Reservation) -> None:
        """Insert or update."""
        ...

    def due_reservations(self, now: datetime) -> list[Reservation]:
        """Held reservations whose ``expires_at`` ≤ now."""
        ...

    def receipt(self, receipt_id: str) -> Receipt | None: ...

    def put_receipt(self, receipt: Receipt) -> None: ...


class SpendStore(Protocol):
    """A store that can open spend transactions."""

    def spend_transaction(self) -> AbstractContextManager[SpendTx]: ...

    def budgets(self) -> list[Budget]: ...


class SpendEngine:
    """Budgets and holds over a :class:`SpendStore`. Thread-safe (the store serialises)."""

    def __init__(
        self,
        store: SpendStore,
        auditor: SpendAuditor,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self._audit = auditor
        self._clock = clock or (lambda: datetime.now(UTC))

    def record_decision(self, budget_id: str, detail: dict[str, Any]) -> None:
        """Chain a ``warden/spend.policy`` entry: a policy decision that stopped a spend
        before any hold (deny, ask, defer, modify), in the budget tree's chain."""
        with self.store.spend_transaction() as tx:
            root = self._path(tx, budget_id)[-1].id
            self._audit(tx, root, "policy", f"policy:{uuid.uuid4()}", detail)

    def now(self) -> datetime:
        """The engine's clock (what its period buckets and expiries are computed from)."""
        return self._clock()

    def within(self, tx: SpendTx) -> SpendEngine:
        """This engine over a transaction the caller has already opened.

        Every operation of the returned engine joins ``tx`` instead of opening its
        own, and commits or rolls back with it: the spend wire uses this to make a
        mutation, its idempotency claim and its stored answer one atomic step. A
        refusal still raises after its audit entry is written into ``tx``; the caller
        decides whether ``tx`` commits (it should, to keep the refusal's entry).
        """
        return SpendEngine(_OpenTransaction(tx), self._audit, clock=self._clock)

    # -- budgets -------------------------------------------------------------------

    def define_budget(self, budget: Budget) -> Budget:
        """Create or update a budget (cap, period, name, principals; kind/parent/currency
        are fixed once set). Raises ``BudgetError``."""
        with self.store.spend_transaction() as tx:
            parent = tx.budget(budget.parent_id) if budget.parent_id else None
            budget.validate(parent)
            existing = tx.budget(budget.id)
            if existing is not None and (existing.kind, existing.parent_id, existing.currency) != (
                budget.kind,
                budget.parent_id,
                budget.currency,
            ):
                from warden.spend.budgets import BudgetError

                raise BudgetError(
                    f"budget {budget.id} exists as a {existing.kind.value} under "
                    f"{existing.parent_id} in {existing.currency}; only cap, period, name and "
                    "principals can change"
                )
            if not tx.put_budget(budget):
                return budget  # stored exactly so already (e.g. by another replica): no entry
            root = self._path(tx, budget.id)[-1]
            self._audit(
                tx,
                root.id,
                "budget",
                f"budget:{budget.id}:{uuid.uuid4()}",
                {
                    "budget_id": budget.id,
                    "kind": budget.kind.value,
                    "parent_id": budget.parent_id,
                    "currency": budget.currency,
                    "cap": to_wire(budget.cap),
                    "period": budget.period.value,
                    "principals": list(budget.principals),
                    # The whole row, so `warden verify` can rebuild it (issue 17).
                    "name": budget.name,
                    "updated": existing is not None,
                },
            )
        return budget

    def path(self, budget_id: str) -> list[Budget]:
        """The budget and its ancestors, agent first. Raises :class:`UnknownBudget`."""
        with self.store.spend_transaction() as tx:
            return self._path(tx, budget_id)

    @staticmethod
    def _path(tx: SpendTx, budget_id: str) -> list[Budget]:
        path: list[Budget] = []
        current: str | None = budget_id
        while current is not None:
            b = tx.budget(current)
            if b is None:
                raise UnknownBudget.of(current)
            path.append(b)
            current = b.parent_id
            if len(path) > 8:
                raise UnknownBudget(f"budget {budget_id} has a cyclic parent chain")
        return path

    def remaining(self, budget_id: str) -> tuple[Decimal, str]:
        """What can still be reserved through ``budget_id`` now (the tightest cap on the
        path) and its currency."""
        now = self._clock()
        with self.store.spend_transaction() as tx:
            path = self._path(tx, budget_id)
            left = min(
                b.cap - sum(tx.usage(b.id, period_key(b.period, now)), Decimal(0)) for b in path
            )
        return max(left, Decimal(0)), path[0].currency

    # -- holds ---------------------------------------------------------------------

    def reserve(
        self,
        budget_id: str,
        amount: Any,
        currency: str,
        *,
        action: str,
        hold_seconds: int = DEFAULT_HOLD_SECONDS,
        meta: dict[str, Any] | None = None,
        principal: str | None = None,
        decided: dict[str, Any] | None = None,
    ) -> Reservation:
        """Hold ``amount`` against every budget on the path, atomically, or raise.

        ``principal`` owns the hold and its receipt (None: nobody; see
        :class:`~warden.spend.records.Reservation`). Whether the principal may spend the
        budget is the caller's check (the spend wire's binding), not the engine's.
        ``decided`` (a quote's policy decision, :func:`warden.spend.asks.decided_record`)
        is recorded as is on the ``reserve`` or ``refused`` entry.
        Raises :class:`BudgetExceeded` (naming the tightest budget, its cap, what is
        left and what was asked), :class:`UnknownBudget`, ``MoneyError``.
        """
        value = parse_amount(amount, allow_zero=False)
        if not 1 <= hold_seconds <= MAX_HOLD_SECONDS:
            raise MoneyError(
                f"hold_seconds must be 1..{MAX_HOLD_SECONDS}",
                reason="invalid_hold",
                field="hold_seconds",
            )
        now = self._clock()
        with self.store.spend_transaction() as tx:
            path, buckets, usages, refusal = self._room(
                tx, budget_id, value, currency, action, now, decided
            )
            root = path[-1].id
            if refusal is None:
                for b, k, (reserved, settled) in zip(path, buckets, usages, strict=True):
                    tx.set_usage(b.id, k, reserved + value, settled)
                res = Reservation(
                    id=f"res_{uuid.uuid4().hex}",
                    budget_id=budget_id,
                    path=tuple(b.id for b in path),
                    buckets=buckets,
                    currency=currency,
                    amount=value,
                    action=action,
                    status=HoldStatus.HELD,
                    created_at=now,
                    expires_at=now + timedelta(seconds=hold_seconds),
                    meta=dict(meta or {}),
                    principal=principal,
                )
                tx.put_reservation(res)
                detail = _hold_detail(res)
                if decided is not None:
                    detail["decided"] = decided
                self._audit(tx, root, "reserve", f"reserve:{res.id}", detail)
        if refusal is not None:
            raise refusal
        return res

    def refuse_unless_fits(
        self,
        budget_id: str,
        amount: Decimal,
        currency: str,
        *,
        action: str,
        decided: dict[str, Any] | None = None,
    ) -> None:
        """Refuse now what :meth:`reserve` would refuse, holding nothing: raise
        :class:`BudgetExceeded` (its ``refused`` entry written, as :meth:`reserve` writes
        it) when ``amount`` is more than a budget on the path has left. The spend quote
        asks this before it asks a human (decision 920): no approval could make such a
        quote fit. Inside a joined transaction the answer holds until it ends; the hold
        itself still checks again."""
        value = parse_amount(amount, allow_zero=False)
        with self.store.spend_transaction() as tx:
            refusal = self._room(tx, budget_id, value, currency, action, self._clock(), decided)[3]
        if refusal is not None:
            raise refusal

    def _room(
        self,
        tx: SpendTx,
        budget_id: str,
        value: Decimal,
        currency: str,
        action: str,
        now: datetime,
        decided: dict[str, Any] | None,
    ) -> tuple[list[Budget], tuple[str, ...], list[tuple[Decimal, Decimal]], SpendError | None]:
        """Expire due holds, then read ``budget_id``'s path, its buckets and their usage,
        and the refusal (its ``refused`` entry written in ``tx``) when ``value`` does not
        fit on every budget of the path. Raises ``UnknownBudget``, ``MoneyError``."""
        self._expire(tx, now)
        path = self._path(tx, budget_id)
        if path[0].currency != currency:
            raise MoneyError(
                f"budget {budget_id} is in {path[0].currency}, the spend is in {currency}",
                reason="currency_mismatch",
                field="currency",
            )
        buckets = tuple(period_key(b.period, now) for b in path)
        usages = [tx.usage(b.id, k) for b, k in zip(path, buckets, strict=True)]
        refusal: SpendError | None = None
        for b, (reserved, settled) in zip(path, usages, strict=True):
            available = b.cap - reserved - settled
            if value > available:
                refusal = BudgetExceeded(
                    b.id,
                    cap=b.cap,
                    available=max(available, Decimal(0)),
                    requested=value,
                    currency=currency,
                )
                break
        if refusal is not None:
            self._audit(
                tx,
                path[-1].id,
                "refused",
                f"refused:{uuid.uuid4()}",
                {
                    "budget_id": budget_id,
                    "amount": to_wire(value),
                    "currency": currency,
                    "action": action,
                    "gate": refusal.gate,
                    **refusal.data,
                    **({"decided": decided} if decided is not None else {}),
                },
            )
        return path, buckets, usages, refusal

    def settle(
        self, reservation_id: str, actual: Any, *, resources: tuple[dict[str, str], ...] = ()
    ) -> Receipt:
        """Charge ``actual`` (≤ the reserved amount) and release the rest; return the receipt.

        More than reserved: refused with :class:`SettlementExceedsReservation`, flagged in
        the ledger, and the hold stays until released or expired.
        """
        value = parse_amount(actual, field="actual")
        now = self._clock()
        refusal: SpendError | None = None
        with self.store.spend_transaction() as tx:
            res, refusal = self._held(tx, reservation_id, now)
            if res is None:
                pass  # refusal is set; the expiries done on the way still commit
            elif value > res.amount:
                root = res.path[-1]
                refusal = SettlementExceedsReservation(
                    reservation_id, reserved=res.amount, actual=value
                )
                self._audit(
                    tx,
                    root,
                    "settle_refused",
                    f"settle_refused:{res.id}:{uuid.uuid4()}",
                    {**_hold_detail(res), "actual": to_wire(value), "flagged": True},
                )
            else:
                for b, k in zip(res.path, res.buckets, strict=True):
                    reserved, settled = tx.usage(b, k)
                    tx.set_usage(b, k, reserved - res.amount, settled + value)
                receipt = Receipt(
                    id=f"rcp_{uuid.uuid4().hex}",
                    reservation_id=res.id,
                    budget_id=res.budget_id,
                    action=res.action,
                    currency=res.currency,
                    amount=value,
                    created_at=now,
                    resources=resources,
                    principal=res.principal,
                )
                tx.put_receipt(receipt)
                tx.put_reservation(
                    replace(
                        res, status=HoldStatus.SETTLED, settled_amount=value, receipt_id=receipt.id
                    )
                )
                self._audit(
                    tx,
                    res.path[-1],
                    "settle",
                    f"settle:{res.id}",
                    {**_hold_detail(res), "actual": to_wire(value), "receipt_id": receipt.id},
                )
        if refusal is not None:
            raise refusal
        return receipt

    def release(self, reservation_id: str, *, reason: str = "released") -> Reservation:
        """Release a held reservation (the action failed, was cancelled or blocked)."""
        now = self._clock()
        with self.store.spend_transaction() as tx:
            res, refusal = self._held(tx, reservation_id, now)
            if res is not None:
                released = self._release(tx, res, HoldStatus.RELEASED, reason)
        if refusal is not None:
            raise refusal
        return released

    def expire_due(self) -> int:
        """Release every held reservation past its expiry; return how many."""
        now = self._clock()
        with self.store.spend_transaction() as tx:
            return self._expire(tx, now)

    def undo(self, receipt_id: str, *, reason: str = "undo") -> Receipt:
        """Reverse a settled spend: its amount returns to every budget it was charged to."""
        now = self._clock()
        with self.store.spend_transaction() as tx:
            receipt = tx.receipt(receipt_id)
            if receipt is None:
                raise UnknownReceipt.of(receipt_id)
            if receipt.undone_at is not None:
                raise AlreadyUndone(
                    f"receipt {receipt_id} was undone at {receipt.undone_at.isoformat()}",
                    receipt_id=receipt_id,
                )
            res = tx.reservation(receipt.reservation_id)
            assert res is not None  # a receipt is written with its reservation
            for b, k in zip(res.path, res.buckets, strict=True):
                reserved, settled = tx.usage(b, k)
                tx.set_usage(b, k, reserved, settled - receipt.amount)
            undone = replace(receipt, undone_at=now)
            tx.put_receipt(undone)
            self._audit(
                tx,
                res.path[-1],
                "undo",
                f"undo:{receipt.id}",
                {
                    "receipt_id": receipt.id,
                    "reservation_id": res.id,
                    "amount": to_wire(receipt.amount),
                    "currency": receipt.currency,
                    "reason": reason,
                },
            )
        return undone

    def reservation(self, reservation_id: str) -> Reservation:
        """Read a reservation (expiring it first if due). Raises UnknownReservation."""
        now = self._clock()
        with self.store.spend_transaction() as tx:
            self._expire(tx, now)
            res = tx.reservation(reservation_id)
        if res is None:
            raise UnknownReservation.of(reservation_id)
        return res

    def receipt(self, receipt_id: str) -> Receipt:
        with self.store.spend_transaction() as tx:
            receipt = tx.receipt(receipt_id)
        if receipt is None:
            raise UnknownReceipt.of(receipt_id)
        return receipt

    # -- internals -----------------------------------------------------------------

    def _held(
        self, tx: SpendTx, reservation_id: str, now: datetime
    ) -> tuple[Reservation | None, SpendError | None]:
        """The held reservation, or the error to raise once the transaction commits."""
        self._expire(tx, now)
        res = tx.reservation(reservation_id)
        if res is None:
            return None, UnknownReservation.of(reservation_id)
        if res.status is not HoldStatus.HELD:
            return None, ReservationNotHeld(reservation_id, res.status.value)
        return res, None

    def _release(
        self, tx: SpendTx, res: Reservation, status: HoldStatus, reason: str
    ) -> Reservation:
        for b, k in zip(res.path, res.buckets, strict=True):
            reserved, settled = tx.usage(b, k)
            tx.set_usage(b, k, reserved - res.amount, settled)
        done = replace(res, status=status, reason=reason)
        tx.put_reservation(done)
        event = "expire" if status is HoldStatus.EXPIRED else "release"
        self._audit(
            tx, res.path[-1], event, f"{event}:{res.id}", {**_hold_detail(res), "reason": reason}
        )
        return done

    def _expire(self, tx: SpendTx, now: datetime) -> int:
        due = tx.due_reservations(now)
        for res in due:
            self._release(tx, res, HoldStatus.EXPIRED, "expired")
        return len(due)


class _OpenTransaction:
    """A :class:`SpendStore` over one already-open transaction (:meth:`SpendEngine.within`)."""

    def __init__(self, tx: SpendTx) -> None:
        self._tx = tx

    def spend_transaction(self) -> AbstractContextManager[SpendTx]:
        return nullcontext(self._tx)

    def budgets(self) -> list[Budget]:
        # Listing opens its own transaction on the real store; inside an open one it
        # would nest. Nothing in the engine lists budgets.
        raise RuntimeError("budgets() is not available inside a joined transaction")


def _hold_detail(res: Reservation) -> dict[str, Any]:
    detail = {
        "reservation_id": res.id,
        "budget_id": res.budget_id,
        "path": list(res.path),
        "buckets": list(res.buckets),
        "amount": to_wire(res.amount),
        "currency": res.currency,
        "action": res.action,
        "expires_at": res.expires_at.isoformat(),
    }
    if res.principal is not None:  # who took the hold (absent: owned by nobody)
        detail["principal"] = res.principal
    return detail


def iter_path(budgets: list[Budget], budget_id: str) -> Iterator[Budget]:
    """Walk ``budget_id`` up to its root within an in-memory list (for listings)."""
    by_id = {b.id: b for b in budgets}
    current: str | None = budget_id
    while current is not None and current in by_id:
        yield by_id[current]
        current = by_id[current].parent_id
