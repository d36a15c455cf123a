"""Spend errors; each names its Governed Spend gate (``blockedBy``) and ACS reason code."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from warden.errors import InputRejected, WardenError
from warden.spend.money import to_wire


class SpendError(WardenError):
    """Root of spend refusals. ``gate`` is the ``blockedBy`` value (``namespace:snake``)."""

    gate = "spend:error"
    retryable = False


class BudgetExceeded(SpendError):
    """The amount does not fit under a budget on the path (limit = what was left)."""

    gate = "budget:exceeded"
    reason = "budget_exceeded"

    def __init__(
        self, budget_id: str, *, cap: Decimal, available: Decimal, requested: Decimal, currency: str
    ) -> None:
        super().__init__(
            f"{to_wire(requested)} {currency} does not fit in budget {budget_id}: "
            f"{to_wire(available)} of {to_wire(cap)} {currency} left",
            budget_id=budget_id,
            cap=to_wire(cap),
            available=to_wire(available),
            requested=to_wire(requested),
            currency=currency,
        )
        self.budget_id = budget_id
        self.cap = cap
        self.available = available
        self.requested = requested
        self.currency = currency

    def budget_detail(self) -> dict[str, Any]:
        """The verdict's ``policy_data.budget`` for this refusal: ``budget_id``,
        ``limit``, ``requested``, ``currency`` and ``available`` (amounts as wire strings)."""
        return {
            "budget_id": self.budget_id,
            "limit": to_wire(self.cap),
            "requested": to_wire(self.requested),
            "currency": self.currency,
            "available": to_wire(self.available),
        }


class UnknownBudget(SpendError, InputRejected):
    gate = "input:unknown_budget"
    reason = "unknown_budget"

    @classmethod
    def of(cls, budget_id: str) -> UnknownBudget:
        """The one refusal for a budget that is absent — or not the caller's, which must
        answer exactly alike."""
        return cls(f"no budget {budget_id!r}", budget_id=budget_id)


class UnknownReservation(SpendError, InputRejected):
    gate = "input:unknown_reservation"
    reason = "unknown_reservation"

    @classmethod
    def of(cls, reservation_id: str) -> UnknownReservation:
        """The one refusal for an absent (or another principal's) reservation."""
        return cls(f"no reservation {reservation_id!r}", reservation_id=reservation_id)


class UnknownReceipt(SpendError, InputRejected):
    gate = "input:unknown_receipt"
    reason = "unknown_receipt"

    @classmethod
    def of(cls, receipt_id: str) -> UnknownReceipt:
        """The one refusal for an absent (or another principal's) receipt."""
        return cls(f"no receipt {receipt_id!r}", receipt_id=receipt_id)


class NotOwner(SpendError):
    """A key that may read a budget, hold or receipt tries to spend or conclude it as
    someone else (an admin key not bound to the budget, not the hold's owner).
    ``hint`` says which key can (issue 14 item 1; :mod:`warden.spend.ownership`)."""

    gate = "auth:forbidden"
    reason = "forbidden"

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class OtherWire(SpendError):
    """A hold another wire took (AdCP, the ACS spend gate): that wire concludes it."""

    gate = "reservation:other_wire"
    reason = "other_wire"


class OtherWireBudget(OtherWire):
    """An AdCP plan's budget (``adcp:…``): AdCP manages it, the spend wire only reads it
    (decision 923)."""

    gate = "budget:other_wire"


class ReservationNotHeld(SpendError):
    """The reservation was already settled, released or expired."""

    gate = "reservation:not_held"
    reason = "reservation_not_held"

    def __init__(self, reservation_id: str, status: str, **data: Any) -> None:
        super().__init__(
            f"reservation {reservation_id} is {status}, not held",
            reservation_id=reservation_id,
            status=status,
            **data,
        )
        self.status = status


class SettlementExceedsReservation(SpendError):
    """The actual cost is more than was reserved: refused and flagged in the ledger."""

    gate = "budget:settlement_exceeds_reservation"
    reason = "settlement_exceeds_reservation"

    def __init__(self, reservation_id: str, *, reserved: Decimal, actual: Decimal) -> None:
        super().__init__(
            f"settlement of {to_wire(actual)} exceeds the {to_wire(reserved)} reserved by "
            f"{reservation_id}; refused and flagged",
            reservation_id=reservation_id,
            reserved=to_wire(reserved),
            actual=to_wire(actual),
        )
        self.reserved = reserved
        self.actual = actual


class AlreadyUndone(SpendError):
    gate = "receipt:already_undone"
    reason = "already_undone"
