"""The plan rules behind a ``check_governance`` verdict (specs/adcp-spend-kla.md §1.6).

:func:`evaluate` is pure: a :class:`Plan`, one check (:class:`CheckInput`) and what
is left of the plan's budget in, an :class:`Evaluation` out. The order is fixed:

1. **denied** when any critical finding stands: the plan's flight is over or the
   action's ``start_time``/``end_time`` fall outside it, the
   commitment's currency is not the plan's, an intent check states no commitment at all
   (every governed action is treated as monetary: a token must carry
   ``authorized_commitment``, §1.7; ``0`` for a no-cost action), the payload commits more
   than the ``proposed_commitment``, the commitment exceeds what is left of the
   budget, or the target seller is not among ``approved_sellers``;
2. **conditions** (intent checks only) when a ``must`` custom policy is not yet
   acknowledged in ``payload.ext.governance_policy_acknowledgements``: the condition
   names that field, the value required and the policy text;
3. **review** when the plan requires human review, or when a reallocation (an
   ``update_media_buy`` or ``modification``-phase commitment) exceeds the plan's
   ``reallocation_threshold``;
4. otherwise **approved**.

The bundle's policy rules (``adcp/check_governance``) are applied after this by the
wire (:mod:`warden.adcp.checks`): they can deny or ask, never approve what the
plan denies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from warden.adcp.plans import Plan, parse_time, to_decimal

#: Where a buyer acknowledges a plan's ``must`` policies (governance_conditions.yaml).
ACK_FIELD = "payload.ext.governance_policy_acknowledgements"
REALLOCATION_TOOLS = frozenset({"update_media_buy"})

Kind = Literal["approved", "denied", "conditions", "review"]


@dataclass(frozen=True)
class CheckInput:
    """What one check asks: ``check_type`` intent or execution, the governed ``tool``
    and its ``payload`` (intent), the commitment (``amount``/``currency``, None when the
    request states none), the seller (``target_agent``) and the ``phase``."""

    check_type: Literal["intent", "execution"]
    tool: str | None
    payload: dict[str, Any]
    amount: Decimal | None
    currency: str | None
    target_agent: str | None
    phase: str = "purchase"
    #: What the intent's ``payload`` itself commits (its ``total_budget``, else the sum
    #: of its ``packages[].budget``), None when it states nothing.
    payload_amount: Decimal | None = None


@dataclass
class Evaluation:
    """The plan's answer: ``kind``, the wire ``findings`` and ``conditions``, the
    ``explanation``, why a human must review (``review_reason``), and what was checked."""

    kind: Kind
    explanation: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    review_reason: str | None = None
    categories_evaluated: list[str] = field(default_factory=list)
    policies_evaluated: list[str] = field(default_factory=list)


def _number(value: Any) -> Decimal | None:
    if isinstance(value, dict):
        value = value.get("amount")
    try:
        return to_decimal(value)
    except TypeError:
        return None


def commitment_of(request: dict[str, Any]) -> tuple[Decimal | None, str | None]:
    """The monetary commitment a check request states, and its currency.

    In order: ``proposed_commitment``, ``execution_commitment``,
    ``planned_delivery.total_budget``, the payload's ``total_budget`` (a number or
    ``{amount, currency}``), the sum of ``payload.packages[].budget``. ``(None, None)``
    when none is stated.
    """
    for key in ("proposed_commitment", "execution_commitment"):
        c = request.get(key)
        if isinstance(c, dict):
            return _number(c), c.get("currency")
    planned = request.get("planned_delivery")
    if isinstance(planned, dict) and "total_budget" in planned:
        return _number(planned["total_budget"]), planned.get("currency")
    payload = request.get("payload")
    if not isinstance(payload, dict):
        return None, None
    total = payload.get("total_budget")
    if total is not None:
        currency = total.get("currency") if isinstance(total, dict) else None
        return _number(total), currency
    packages = payload.get("packages")
    if isinstance(packages, list) and packages:
        amounts = [_number(p.get("budget")) for p in packages if isinstance(p, dict)]
        if amounts and all(a is not None for a in amounts):
            return sum((a for a in amounts if a is not None), Decimal(0)), None
    return None, None


def _dates(payload: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    """The payload's ``start_time`` and ``end_time`` when they are date-times (``asap``
    and absent are None)."""
    out: list[datetime | None] = []
    for key in ("start_time", "end_time"):
        value = payload.get(key)
        try:
            at = parse_time(value) if isinstance(value, str) else None
        except ValueError:
            at = None
        out.append(at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at)
    return out[0], out[1]


def _acknowledged(payload: dict[str, Any]) -> set[str]:
    ext = payload.get("ext")
    acks = ext.get("governance_policy_acknowledgements") if isinstance(ext, dict) else None
    return {a for a in acks if isinstance(a, str)} if isinstance(acks, list) else set()


def _wire_number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def evaluate(plan: Plan, check: CheckInput, remaining: Decimal, now: datetime) -> Evaluation:
    """Apply the plan's rules to ``check`` (see the module docstring for the order).

    ``remaining`` is what the plan's budget can still commit (total minus held and
    settled). Findings carry ``category_id``, ``severity`` and ``explanation``.
    """
    findings: list[dict[str, Any]] = []
    categories = ["flight", "budget_authority", "seller_authorization"]
    start, end = _dates(check.payload)
    outside = now > plan.flight_end or (start is not None and start < plan.flight_start)
    if outside or (end is not None and end > plan.flight_end):
        findings.append(
            {
                "category_id": "flight",
                "severity": "critical",
                "explanation": f"Plan {plan.plan_id} flies from {plan.flight_start.isoformat()} "
                f"to {plan.flight_end.isoformat()}; this action falls outside its flight.",
            }
        )
    if check.currency is not None and check.currency != plan.currency:
        findings.append(
            {
                "category_id": "budget_authority",
                "severity": "critical",
                "explanation": f"The commitment is in {check.currency}; the plan's budget is "
                f"in {plan.currency}.",
                "details": {"plan_currency": plan.currency},
            }
        )
    elif check.check_type == "intent" and check.amount is None:
        findings.append(
            {
                "category_id": "budget_authority",
                "severity": "critical",
                "explanation": "The check states no commitment: send proposed_commitment "
                "(amount 0 for an action that costs nothing), or a payload total_budget or "
                "packages[].budget. Warden authorizes no action without a ceiling.",
                "details": {"field": "proposed_commitment"},
            }
        )
    elif (
        check.check_type == "intent"
        and check.amount is not None
        and check.payload_amount is not None
        and check.payload_amount > check.amount
    ):
        findings.append(
            {
                "category_id": "budget_authority",
                "severity": "critical",
                "explanation": f"The payload commits {check.payload_amount} {plan.currency}, "
                f"more than the proposed commitment of {check.amount}; the commitment must "
                "cover the payload.",
                "details": {
                    "proposed": _wire_number(check.amount),
                    "payload": _wire_number(check.payload_amount),
                    "currency": plan.currency,
                },
            }
        )
    elif check.amount is not None and check.amount > remaining:
        findings.append(
            {
                "category_id": "budget_authority",
                "severity": "critical",
                "explanation": f"The commitment of {check.amount} {plan.currency} exceeds what "
                f"is left of plan {plan.plan_id}'s budget ({remaining} of {plan.total}).",
                "details": {
                    "requested": _wire_number(check.amount),
                    "plan_total": _wire_number(plan.total),
                    "remaining": _wire_number(remaining),
                    "currency": plan.currency,
                },
            }
        )
    if (
        plan.approved_sellers is not None
        and check.target_agent is not None
        and check.target_agent not in plan.approved_sellers
    ):
        findings.append(
            {
                "category_id": "seller_authorization",
                "severity": "critical",
                "explanation": f"{check.target_agent} is not among the plan's approved sellers.",
            }
        )
    policies = [str(p["policy_id"]) for p in plan.must_policies]
    if findings:
        return Evaluation(
            "denied",
            " ".join(f["explanation"] for f in findings),
            findings=findings,
            categories_evaluated=categories,
            policies_evaluated=policies,
        )
    if check.check_type == "intent" and plan.must_policies:
        missing = [
            p for p in plan.must_policies if p["policy_id"] not in _acknowledged(check.payload)
        ]
        if missing:
            return Evaluation(
                "conditions",
                "Approval needs the plan's mandatory policies acknowledged: "
                + ", ".join(str(p["policy_id"]) for p in missing)
                + ".",
                conditions=[
                    {
                        "field": ACK_FIELD,
                        "required_value": policies,
                        "reason": "; ".join(
                            str(p.get("policy") or p["policy_id"]) for p in missing
                        ),
                    }
                ],
                categories_evaluated=categories,
                policies_evaluated=policies,
            )
    reallocation = check.tool in REALLOCATION_TOOLS or check.phase == "modification"
    review: str | None = None
    if plan.human_review_required:
        review = "the plan requires human review of every governed action"
    elif (
        reallocation
        and plan.reallocation_threshold is not None
        and check.amount is not None
        and check.amount > plan.reallocation_threshold
    ):
        review = (
            f"this reallocation of {check.amount} {plan.currency} exceeds the plan's "
            f"reallocation threshold of {plan.reallocation_threshold}"
        )
    if review is not None:
        return Evaluation(
            "review",
            f"A human must review this action: {review}.",
            review_reason=review,
            categories_evaluated=categories,
            policies_evaluated=policies,
        )
    return Evaluation(
        "approved",
        f"Within plan {plan.plan_id}: budget, flight and sellers allow it.",
        categories_evaluated=categories,
        policies_evaluated=policies,
    )
