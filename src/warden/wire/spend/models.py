"""Request bodies and response envelopes of the Governed Spend wire, as pydantic models.

Requests are parsed by these models (unknown fields refused; amounts are a
decimal string or an integer, never a float). The response models describe in
the OpenAPI document what :mod:`warden.wire.spend.render` emits; the seed schema
(``schemas/spend/envelope.schema.json``) is the contract the tests check every
response against. Field names are the wire's (camelCase); money is a decimal
string, and a ``…Usd`` member is the same amount as a JSON number, because the
seed schema demands numbers there.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from warden.reasons import NO_REASON, says_something
from warden.spend.binding import MAX_PRINCIPALS
from warden.spend.budgets import BudgetKind, Period
from warden.spend.engine import MAX_HOLD_SECONDS


def _amount(value: Any) -> str | int:
    # One clear error instead of pydantic's one-per-union-member; the value itself is
    # checked by warden.spend.money.parse_amount.
    if isinstance(value, bool) or not isinstance(value, str | int):
        what = "floats are refused" if isinstance(value, float) else f"not {_json_type(value)}"
        raise PydanticCustomError(
            "amount_type", f'must be a decimal string ("12.50") or an integer; {what}'
        )
    return value


def _said(reason: str) -> str:
    # A reason of only whitespace or invisible characters is no reason (decision 942).
    if not says_something(reason):
        raise PydanticCustomError(
            "reason_blank",
            f"must say why; {NO_REASON}",
        )
    return reason


def _json_type(value: Any) -> str:
    """The JSON type of a parsed value that is no amount, for its refusal (decision 924)."""
    if isinstance(value, bool):
        return "a boolean"
    return {type(None): "null", list: "an array", dict: "an object"}.get(type(value), "a number")


Amount = Annotated[
    str | int,
    PlainValidator(_amount),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string"}, {"type": "integer"}],
            "description": 'A decimal string ("12.50") or an integer; floats are refused.',
            "examples": ["12.50"],
        }
    ),
]
Currency = Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$", examples=["USD"])]
Id = Annotated[StrictStr, Field(min_length=1, max_length=128)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QuoteRequest(_Request):
    """Reserve ``amount`` against ``budgetId`` (and every budget above it) for ``action``."""

    budgetId: Id
    action: Annotated[StrictStr, Field(min_length=1, max_length=128, examples=["buy_domain"])]
    amount: Amount
    currency: Currency
    holdSeconds: Annotated[StrictInt, Field(ge=1, le=MAX_HOLD_SECONDS)] | None = Field(
        None, description="How long the hold lasts unless committed or released (default 900)."
    )


class Resource(BaseModel):
    """A provider reference for something the action created."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    provider: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    externalId: Annotated[StrictStr, Field(min_length=1, max_length=256)]


class CommitRequest(_Request):
    """Settle a reservation at the actual cost (at most the amount reserved)."""

    actualAmount: Amount
    resources: list[Resource] = Field(default_factory=list, max_length=50)


class ReasonRequest(_Request):
    """An optional reason recorded with a release or an undo."""

    reason: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None


class BudgetDefinition(_Request):
    """Create or update a budget (kind, parent and currency are fixed once set)."""

    kind: BudgetKind
    parent: Id | None = None
    currency: Currency
    cap: Amount
    period: Period
    name: Annotated[StrictStr, Field(max_length=200)] = ""
    principals: list[StrictStr] | None = Field(
        None,
        max_length=MAX_PRINCIPALS,
        description="Who may spend it: API key principals and group:<name> entries "
        "(omitted: the stored binding stays, none for a new budget; []: nobody).",
        examples=[["deploy-bot", "group:ops"]],
    )


class BudgetIncreaseRequest(_Request):
    """Ask a human to raise a budget's cap to ``cap``."""

    budgetId: Id
    cap: Amount
    reason: Annotated[StrictStr, Field(min_length=1, max_length=500), AfterValidator(_said)]


# -- responses -------------------------------------------------------------------------


class Resolution(BaseModel):
    """The legitimate path forward; absent when none exists."""

    type: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    taskId: str | None = None
    hint: str | None = None
    path: str | None = None
    note: str | None = None


class ErrorEnvelope(BaseModel):
    """An error (seed ``#/$defs/errorEnvelope``): ``blockedBy`` names the gate."""

    blockedBy: str = Field(pattern=r"^[a-z][a-z0-9]*:[a-z0-9_.]+$")
    message: str
    limit: float | None = None
    requested: float | None = None
    retryable: bool
    resolution: Resolution | None = None
    replayed: bool | None = None


class Undo(BaseModel):
    """How to reverse the mutation: a concrete call, or ``command: null`` and
    ``irreversible: true``."""

    command: str | None
    irreversible: bool


class Receipt(BaseModel):
    """What happened, its costs (USD numbers) and provider references."""

    action: str
    oneTimeUsd: float = Field(ge=0)
    monthlyDeltaUsd: float
    resources: list[Resource]
    receiptId: str | None = None
    reservationId: str | None = None
    amount: str | None = Field(None, description="The amount charged, as a decimal string.")
    refundUsd: float | None = None
    refund: str | None = None
    currency: str | None = None


class _Mutation(BaseModel):
    """The §3.1 mutating-success members of ``data``."""

    receipt: Receipt
    undo: Undo
    budgetRemainingUsd: float = Field(ge=0)
    budgetRemaining: str = Field(description="budgetRemainingUsd as a decimal string.")
    currency: Literal["USD"]


class ReservationRef(BaseModel):
    reservationId: str
    expiresAt: str


class Quote(BaseModel):
    budgetId: str
    action: str
    amount: str
    currency: str
    verdict: Literal["ALLOW"]
    reservation: ReservationRef


class ReservationView(BaseModel):
    reservationId: str
    budgetId: str
    action: str
    amount: str
    currency: str
    status: Literal["held", "settled", "released", "expired"]
    createdAt: str
    expiresAt: str
    settledAmount: str | None = None
    receiptId: str | None = None
    reason: str | None = None


class BudgetView(BaseModel):
    budgetId: str
    kind: BudgetKind
    parent: str | None
    name: str
    currency: str
    cap: str
    period: Period
    bucket: str = Field(description="The current period bucket (2026-11-29, 2026-11 or all).")
    periodEndsAt: str | None
    reserved: str
    settled: str
    available: str = Field(description="cap - reserved - settled of this budget alone.")
    remaining: str = Field(description="What can be reserved through it now (tightest cap).")
    remainingUsd: float
    principals: list[str] = Field(
        description="Who may spend it: principals and group:<name> entries ([]: nobody)."
    )


class TaskView(BaseModel):
    taskId: str
    kind: str
    status: Literal["input_required", "working", "completed", "failed", "canceled"]
    terminal: bool
    createdAt: str
    updatedAt: str
    budgetId: str | None = None
    currentCap: str | None = None
    requestedCap: str | None = None
    currency: str | None = None
    reason: str | None = None
    state: Literal["pending", "approved", "denied", "expired", "consumed", "canceled"] | None = (
        Field(None, description="The approval desk's state of the task.")
    )
    amount: str | None = None
    action: str | None = None


class QuoteData(_Mutation):
    quote: Quote


class CommitData(_Mutation):
    reservation: ReservationView


class ReleaseData(_Mutation):
    reservation: ReservationView


class UndoData(_Mutation):
    pass


class BudgetDefineData(_Mutation):
    budget: BudgetView


class BudgetListData(BaseModel):
    budgets: list[BudgetView]
    currency: Literal["USD"]


class BudgetData(BaseModel):
    budget: BudgetView
    path: list[str]
    budgetRemainingUsd: float
    budgetRemaining: str
    currency: Literal["USD"]


class ReservationData(BaseModel):
    reservation: ReservationView


class ReceiptData(BaseModel):
    """A committed spend as ``GET /v1/receipts/{id}`` reads it: the receipt its commit
    answered, its budget, when it was charged and, once undone, when (decision 928)."""

    receipt: Receipt
    budgetId: str
    createdAt: str
    undoneAt: str | None = None


class TaskData(BaseModel):
    task: TaskView


D = TypeVar("D", bound=BaseModel)


class Success(BaseModel, Generic[D]):
    """A success (seed ``#/$defs/successEnvelope``). ``replayed`` is present (true) only
    on an Idempotency-Key replay."""

    data: D
    nextActions: list[str]
    replayed: bool | None = None
