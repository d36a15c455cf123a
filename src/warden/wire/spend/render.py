"""Render spend outcomes into the Governed Agent Spend envelope (seed ``003_…``).

Success: ``{data, nextActions}`` (plus ``replayed: true`` on an Idempotency-Key
replay). A mutating success carries ``receipt``, ``undo`` and
``budgetRemainingUsd`` in ``data`` and a non-empty ``nextActions`` on the
envelope. Error: ``{blockedBy, message, retryable, limit?, requested?,
resolution?}`` with a 4xx/5xx status; ``resolution`` is present only when a
legitimate path forward exists (docs/decisions.md, "Governed spend wire").

Money stays ``Decimal`` (decimal strings on the wire) until this edge, where a
``…Usd`` member, ``limit`` and ``requested`` become JSON numbers because the seed
schema demands numbers there; the exact value rides beside them as a string.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from fastapi.responses import Response
from pydantic import BaseModel

from warden.approvals.desk import DeskError
from warden.approvals.tasks import Task
from warden.errors import (
    UNAVAILABLE_RETRY_AFTER_S,
    CouldNotDecide,
    InvalidRequest,
    ParseError,
    WardenError,
)
from warden.spend.budgets import Budget, BudgetError, period_end, period_key
from warden.spend.errors import (
    AlreadyUndone,
    BudgetExceeded,
    NotOwner,
    OtherWire,
    ReservationNotHeld,
    SettlementExceedsReservation,
    UnknownBudget,
    UnknownReceipt,
    UnknownReservation,
)
from warden.spend.money import MoneyError, to_wire
from warden.spend.records import Reservation
from warden.store.idempotency import (
    IdempotencyConflict,
    IdempotencyExpired,
    IdempotencyInFlight,
    InvalidIdempotencyKey,
)
from warden.wire.spend.models import (
    BudgetView,
    ErrorEnvelope,
    Receipt,
    ReservationView,
    Resolution,
    Resource,
    Success,
    TaskView,
    Undo,
)

log = logging.getLogger(__name__)

#: The spend wire is USD-denominated (its numbers are ``…Usd``); ACS may use any currency.
CURRENCY: Final = "USD"
PROVIDER = "warden"


class Refusal(WardenError):
    """An error answer of the spend wire: the gate, HTTP status and what the agent can do."""

    def __init__(
        self,
        gate: str,
        status: int,
        message: str,
        *,
        retryable: bool = False,
        resolution: Resolution | None = None,
        limit: Decimal | None = None,
        requested: Decimal | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=gate.split(":", 1)[1])
        self.gate = gate
        self.status = status
        self.retryable = retryable
        self.resolution = resolution
        self.limit = limit
        self.requested = requested
        self.headers = headers or {}

    def envelope(self) -> ErrorEnvelope:
        fields: dict[str, Any] = {
            "blockedBy": self.gate,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.limit is not None:
            fields["limit"] = usd(self.limit)
        if self.requested is not None:
            fields["requested"] = usd(self.requested)
        if self.resolution is not None:
            fields["resolution"] = self.resolution
        return ErrorEnvelope(**fields)


def retry(hint: str, **extra: str) -> Resolution:
    """A ``retry`` resolution: sending different input (named in ``hint``) can succeed."""
    return Resolution(type="retry", hint=hint, **extra)


def invalid(message: str, *, gate: str = "input:invalid", hint: str | None = None) -> Refusal:
    """Bad input (400): retrying with corrected input can succeed."""
    return Refusal(gate, 400, message, resolution=retry(hint or message))


def currency_not_supported(what: str, currency: str, *, fixable: bool) -> Refusal:
    """A non-USD budget, reservation or amount on this USD-denominated wire."""
    message = (
        f"{what} is in {currency}; the Governed Spend wire is USD-denominated "
        "(budgets in other currencies govern ACS tool calls only)"
    )
    return Refusal(
        "input:currency_not_supported",
        400,
        message,
        resolution=retry('send "currency": "USD"') if fixable else None,
    )


def budget_exceeded(
    exc: BudgetExceeded, budget: Budget, reserved: Decimal, now: datetime
) -> Refusal:
    """402 ``budget:exceeded`` with ``limit`` = what was left and ``requested``.

    ``retryable`` is true when the same request can fit later without anyone acting:
    the amount is within the cap and holds may lapse or the period roll over.
    ``resolution``: a smaller amount when something is left, else a budget request.
    """
    rolls = period_end(budget.period, now)
    retryable = exc.requested <= budget.cap and (rolls is not None or reserved > 0)
    ask = "POST /v1/budget-requests {budgetId, cap, reason} asks a human for a higher cap"
    if exc.available > 0:
        resolution = retry(
            f"at most {to_wire(exc.available)} USD fits in budget {exc.budget_id} now",
            note=ask,
        )
    else:
        resolution = Resolution(type="human_approval", path="/v1/budget-requests", hint=ask)
    message = exc.message
    if rolls is not None:
        message += f"; the {budget.period.value} period of {budget.id} resets at {rfc3339(rolls)}"
    return Refusal(
        exc.gate,
        402,
        message,
        retryable=retryable,
        resolution=resolution,
        limit=exc.available,
        requested=exc.requested,
    )


#: Refusals that differ only in status, retry hint and retryable flag (in match order).
_PLAIN_REFUSALS: dict[type[Exception], tuple[int, str, bool]] = {
    IdempotencyConflict: (409, "a different request needs a new Idempotency-Key", False),
    IdempotencyExpired: (
        409,
        "re-read the state (GET /v1/budgets/{id}, /v1/reservations/{id}) before deciding; "
        "to act again, send a new Idempotency-Key",
        False,
    ),
    IdempotencyInFlight: (409, "retry with the same Idempotency-Key and the same body", True),
    UnknownBudget: (404, "GET /v1/budgets lists the budgets this wire can use", False),
    UnknownReservation: (404, "use the reservationId that POST /v1/quotes returned", False),
    UnknownReceipt: (
        404,
        "use the receiptId that POST /v1/reservations/{id}/commit returned",
        False,
    ),
}


def refusal_for(exc: BaseException) -> Refusal:
    """The wire answer for an exception raised while serving a spend request."""
    if isinstance(exc, Refusal):
        return exc
    if isinstance(exc, InvalidIdempotencyKey):
        return invalid(exc.message, gate=exc.gate)
    for kind, (status, hint, retryable) in _PLAIN_REFUSALS.items():
        if isinstance(exc, kind):
            gate = getattr(exc, "gate", "input:invalid")
            return Refusal(
                gate,
                status,
                exc.message if isinstance(exc, WardenError) else str(exc),
                retryable=retryable,
                resolution=retry(hint),
            )
    if isinstance(exc, NotOwner):
        return Refusal(
            exc.gate,
            403,
            exc.message,
            resolution=Resolution(type="authenticate", hint=exc.hint),
        )
    if isinstance(exc, OtherWire):
        return Refusal(exc.gate, 409, exc.message)
    if isinstance(exc, ReservationNotHeld):
        lapsed = exc.status in ("released", "expired")
        return Refusal(
            exc.gate,
            409,
            exc.message + ("" if lapsed else "; the spend was already settled"),
            resolution=retry("reserve again with POST /v1/quotes") if lapsed else None,
        )
    if isinstance(exc, SettlementExceedsReservation):
        return Refusal(
            exc.gate,
            409,
            exc.message + "; the hold stays until released or expired",
            limit=exc.reserved,
            requested=exc.actual,
        )
    if isinstance(exc, AlreadyUndone):
        return Refusal(exc.gate, 409, exc.message)
    if isinstance(exc, BudgetExceeded):  # without its budget at hand (not expected)
        return Refusal(exc.gate, 402, exc.message, limit=exc.available, requested=exc.requested)
    if isinstance(exc, MoneyError):
        return invalid(exc.message, gate=f"input:{exc.reason}")
    if isinstance(exc, DeskError):
        return Refusal(
            f"approval:{exc.reason}",
            exc.status,
            exc.message,
            resolution=retry("GET /v1/approvals/{taskId} shows the task's state and trail")
            if exc.status == 409
            else None,
        )
    if isinstance(exc, BudgetError):
        return invalid(exc.message, gate="input:invalid_budget")
    if isinstance(exc, ParseError):
        return invalid(exc.message, gate="input:invalid_json", hint="send one JSON object")
    if isinstance(exc, InvalidRequest):
        return invalid(exc.message)
    if isinstance(exc, CouldNotDecide):
        log.warning("spend wire: %s", exc.diagnostics())
        unknown = bool(exc.data.get("outcome_unknown"))
        return Refusal(
            "store:unavailable",
            503,
            "Warden lost the database while committing; the request may have been applied"
            if unknown
            else "Warden could not complete the request; nothing was changed",
            retryable=True,
            resolution=retry(
                "retry with the same Idempotency-Key and body: the stored answer is replayed "
                "if it was applied"
                if unknown
                else "retry shortly with the same Idempotency-Key and body"
            ),
            headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)},
        )
    log.error("spend wire: unexpected error", exc_info=exc)
    return Refusal("internal:error", 500, "internal error; the operator log has the detail")


# -- values ------------------------------------------------------------------------------


def usd(amount: Decimal) -> float:
    """A USD amount as a JSON number (the seed schema's ``…Usd`` members, limit, requested).

    Exact for amounts of up to 15 significant digits; the decimal string beside it
    is always exact.
    """
    return float(amount)


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dump(model: BaseModel) -> dict[str, Any]:
    """A response model as wire JSON: unset optional members are left out, an explicit
    ``None`` (``undo.command``) stays ``null``."""
    return model.model_dump(mode="json", exclude_unset=True)


def to_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def json_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    return Response(to_bytes(body), status, headers=headers, media_type="application/json")


def success(data: BaseModel, next_actions: list[str]) -> dict[str, Any]:
    return dump(Success[Any](data=data, nextActions=next_actions))


def undo_command(command: str) -> Undo:
    return Undo(command=command, irreversible=False)


IRREVERSIBLE = Undo(command=None, irreversible=True)


def receipt(
    action: str, *, one_time: Decimal = Decimal(0), resources: list[Resource], **extra: Any
) -> Receipt:
    """A §3.1 receipt; one-time spends only, so ``monthlyDeltaUsd`` is 0."""
    return Receipt(
        action=action,
        oneTimeUsd=usd(one_time),
        monthlyDeltaUsd=0.0,
        resources=resources,
        **extra,
    )


def warden_resource(kind: str, external_id: str) -> Resource:
    return Resource(kind=kind, provider=PROVIDER, externalId=external_id)


def reservation_view(res: Reservation) -> ReservationView:
    fields: dict[str, Any] = {
        "reservationId": res.id,
        "budgetId": res.budget_id,
        "action": res.action,
        "amount": to_wire(res.amount),
        "currency": res.currency,
        "status": res.status.value,
        "createdAt": rfc3339(res.created_at),
        "expiresAt": rfc3339(res.expires_at),
    }
    if res.settled_amount is not None:
        fields["settledAmount"] = to_wire(res.settled_amount)
    if res.receipt_id is not None:
        fields["receiptId"] = res.receipt_id
    if res.reason is not None:
        fields["reason"] = res.reason
    return ReservationView(**fields)


def budget_view(
    budget: Budget, *, reserved: Decimal, settled: Decimal, remaining: Decimal, now: datetime
) -> BudgetView:
    ends = period_end(budget.period, now)
    return BudgetView(
        budgetId=budget.id,
        kind=budget.kind,
        parent=budget.parent_id,
        name=budget.name,
        currency=budget.currency,
        cap=to_wire(budget.cap),
        period=budget.period,
        bucket=period_key(budget.period, now),
        periodEndsAt=rfc3339(ends) if ends is not None else None,
        reserved=to_wire(reserved),
        settled=to_wire(settled),
        available=to_wire(max(budget.cap - reserved - settled, Decimal(0))),
        remaining=to_wire(remaining),
        remainingUsd=usd(remaining),
        principals=list(budget.principals),
    )


def task_view(task: Task) -> TaskView:
    fields: dict[str, Any] = {
        "taskId": task.id,
        "kind": task.kind.value,
        "status": task.status.value,
        "terminal": task.status.terminal,
        "createdAt": rfc3339(task.created_at),
        "updatedAt": rfc3339(task.updated_at),
    }
    fields["state"] = task.state.value
    for key in ("budgetId", "currentCap", "requestedCap", "currency", "reason", "amount", "action"):
        if key in task.detail:
            fields[key] = task.detail[key]
    return TaskView(**fields)
