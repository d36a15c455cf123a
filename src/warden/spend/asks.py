"""A spend quote and a budget increase as the Guardian and the approval desk see them.

A quote is decided under the policy method ``spend/quote`` (DESIGN.md's decision
table) by :func:`decide_quote`: :func:`quote_request` is its :class:`ActionRequest`,
the pipeline decides it with three gates: the room check
(:class:`~warden.gates.quote_hold.QuoteRoom`: a quote for a human that cannot fit is
refused before it asks), the desk ask (:class:`~warden.gates.desk.DeskAsk`
over :func:`quote_ask`: the same quote, however its amount is written, is one ask) and
the hold (:class:`~warden.gates.quote_hold.QuoteHold`: an allowed or granted quote
reserves its amount); :func:`decision_detail` is what the spend chain records about a
decision that is not ``allow`` — the task, the hold, their entries and that record in
the quote's one transaction.
:func:`winning_gate` is the rule (or reason code) that names a refusal. A budget
increase files :func:`budget_increase_ask`, and approving it runs
:func:`budget_increase_effect` in the desk's transaction.

The spend wire (:mod:`warden.wire.spend.operations`) parses the request, calls these and
renders the answer (docs/decisions.md 390).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Protocol

from warden.approvals.binding import action_hash
from warden.approvals.desk import ApprovalDesk, AskRequest, DeskTx, Resolution
from warden.approvals.tasks import ApprovalState, Requester, Task, TaskKind
from warden.core.guardian import Guardian
from warden.core.pipeline import Gate, Pipeline, Recording
from warden.core.types import ActionRequest, Effect, Verdict
from warden.gates.approval import ask_terms, policy_of
from warden.gates.desk import DeskAsk
from warden.gates.quote_hold import HoldTerms, QuoteHold, QuoteRoom
from warden.identity.api_keys import Identity
from warden.ledger.decided import caller_record, verdict_record
from warden.spend.budgets import Budget
from warden.spend.engine import DEFAULT_HOLD_SECONDS, SpendEngine
from warden.spend.errors import BudgetExceeded
from warden.spend.money import to_wire
from warden.spend.records import Reservation

#: The approver group that decides budget increases, and how long a request stays open.
BUDGET_APPROVERS = "finance"
BUDGET_REQUEST_TIMEOUT_S = 7 * 24 * 3600

#: The only currency the spend wire takes.
USD = "USD"


def quote_request(
    who: Identity,
    payload: dict[str, Any],
    budget_id: str,
    amount: Decimal,
    currency: str,
    action: str,
) -> ActionRequest:
    """The ``spend/quote`` request the Guardian decides: ``payload`` is the quote body as
    received, ``args`` its budget, amount (wire decimal string), currency and action."""
    return ActionRequest(
        method="spend/quote",
        payload=payload,
        metadata={"principal": who.principal},
        tool={
            "name": action,
            "version": "",
            "provider": "spend",
            "operation": "",
            "capability": "spend",
        },
        args={
            "budgetId": budget_id,
            "amount": to_wire(amount),
            "currency": currency,
            "action": action,
        },
        raw_command="",
        session={"id": "", "agent_id": who.principal, "step_count": 0},
    )


def decision_detail(
    who: Identity, verdict: Verdict, budget_id: str, amount: Decimal, currency: str, action: str
) -> dict[str, Any]:
    """What the budget tree's spend chain records about a quote's non-``allow`` decision."""
    return {
        "budget_id": budget_id,
        "amount": to_wire(amount),
        "currency": currency,
        "action": action,
        "decision": verdict.decision.value,
        "reason_codes": list(verdict.reason_codes),
        "rules": [r.rule_id for r in verdict.policy_references],
        "bundle": verdict.bundle.to_wire() if verdict.bundle else None,
        "key_id": who.key_id,
    }


def winning_gate(guardian: Guardian, verdict: Verdict) -> str:
    """``policy:<rule>``: the rule whose effect won (a fired allow rule is not the
    reason), else the first reason code, as a ``blockedBy`` value."""
    rules = [r.rule_id for r in verdict.policy_references]
    winners = [
        rid
        for rid in rules
        if (rule := guardian.engine.rule(rid)) is not None and rule.effect is verdict.decision
    ]
    name = winners[0] if winners else (verdict.reason_codes or ("no_rule_matched",))[0]
    value = re.sub(r"[^a-z0-9_.]+", "_", name.lower()).strip("_")
    return "policy:" + (value or "denied")


def canonical_amount(amount: Decimal) -> str:
    """The shortest plain decimal string of ``amount`` (no exponent, no trailing zeros)."""
    text = to_wire(amount)
    return text.rstrip("0").rstrip(".") if "." in text else text


def quote_ask(
    guardian: Guardian,
    who: Identity,
    verdict: Verdict,
    budget_id: str,
    amount: Decimal,
    action: str,
) -> AskRequest:
    """The desk ask for a quote the policy asks a human about. The amount is canonical,
    so ``1500``, ``1500.0`` and ``1500.00`` are one quote (and one grant)."""
    arguments = {
        "budgetId": budget_id,
        "amount": canonical_amount(amount),
        "currency": USD,
        "action": action,
    }
    return AskRequest(
        kind=TaskKind.SPEND_APPROVAL,
        wire="spend",
        scope=f"spend:{who.principal}",
        action={"method": "spend/quote", "name": action, "arguments": arguments},
        requester=Requester(agent_id=who.principal, principal=who.owner or who.principal),
        correlation={"key_id": who.key_id},
        policy=policy_of(verdict),
        detail=dict(arguments),
        **ask_terms(guardian, verdict),
    )


class QuoteTx(DeskTx, Recording, Protocol):
    """The quote's one write transaction: desk tasks, and reports after its commit."""


@dataclass(frozen=True)
class QuoteDecision:
    """What the policy, the desk when the policy asks, and the budget said about one quote.

    ``verdict`` is the policy's (after the desk ask; a hold the budget refused does not
    change it: see ``refused``). ``resolution`` is the desk's answer to an
    ``ask``/``defer`` (None: the verdict needed no human, or no desk is configured).
    ``reservation`` is the hold the :class:`~warden.gates.quote_hold.QuoteHold` gate
    took (an ``allow``, or an ask a human granted); ``refused`` the budget's refusal of
    that hold (its ``warden/spend.refused`` entry is written). ``decided`` is what the
    spend chain records so that ``warden whatif`` can rebuild the request
    (:func:`decided_record`): on the ``warden/spend.policy`` entry of a decision that is
    not ``allow``, else on the hold's ``warden/spend.reserve`` (or the budget's
    ``warden/spend.refused``) entry."""

    verdict: Verdict
    resolution: Resolution | None
    decided: dict[str, Any] | None = None
    reservation: Reservation | None = None
    refused: BudgetExceeded | None = None


def decided_record(who: Identity, payload: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The additive ``decided`` object of a quote's decision entry (docs/decisions.md
    600): the caller, the quote body as received (the request's ``payload``, from which
    :func:`quote_request`'s other arguments are parsed again) and the verdict."""
    return {"caller": caller_record(who), "payload": payload, "verdict": verdict_record(verdict)}


def decide_quote(
    pipeline: Pipeline,
    desk: ApprovalDesk | None,
    tx: QuoteTx,
    engine: SpendEngine,
    who: Identity,
    payload: dict[str, Any],
    budget_id: str,
    amount: Decimal,
    currency: str,
    action: str,
    *,
    hold_seconds: int = DEFAULT_HOLD_SECONDS,
) -> QuoteDecision:
    """Decide and hold a quote in ``tx`` (``engine`` joined to it): the pipeline with
    the room check, the desk ask and the hold as its gates
    (:class:`~warden.gates.quote_hold.QuoteRoom`, :class:`~warden.gates.desk.DeskAsk` over
    :func:`quote_ask`, then :class:`~warden.gates.quote_hold.QuoteHold`), then the
    ``warden/spend.policy`` entry of a policy decision that is not ``allow``. The task or
    grant, the hold and the entries commit together; the final verdict (a refused hold:
    a deny ``budget_exceeded``) reaches the observers once ``tx`` has committed. Store
    failures propagate (the caller's transaction rolls back)."""
    request = quote_request(who, payload, budget_id, amount, currency, action)
    guardian = pipeline.guardian
    ask: DeskAsk | None = None
    terms = HoldTerms(
        budget_id,
        amount,
        currency,
        action,
        hold_seconds,
        who.principal,
        {"wire": "spend", "key_id": who.key_id},
    )
    hold = QuoteHold(engine, terms, None, lambda verdict: decided_record(who, payload, verdict))
    # A quote no human could make fit is refused before it asks one (decision 920).
    gates: list[Gate] = [QuoteRoom(hold)]
    if desk is not None:
        ask = DeskAsk(
            desk,
            tx,
            lambda _req, verdict: quote_ask(guardian, who, verdict, budget_id, amount, action),
            {"wire": "spend", "route": "POST /v1/quotes", "key_id": who.key_id},
        )
        gates.append(ask)
    hold.ask = ask
    gates.append(hold)
    decided = pipeline.run(who.as_principal(), request, gates=gates)
    pipeline.finished_after(tx, "spend", decided)
    # What policy (and the desk) said: the verdict the hold acted on, else the final one.
    verdict = hold.decided_by if hold.decided_by is not None else decided.verdict
    record = decided_record(who, payload, verdict)
    if verdict.decision is not Effect.ALLOW:
        detail = decision_detail(who, verdict, budget_id, amount, currency, action)
        engine.record_decision(budget_id, {**detail, "decided": record})
    resolution = ask.resolution if ask is not None else None
    return QuoteDecision(verdict, resolution, record, hold.reservation, hold.refused)


def budget_increase_ask(
    who: Identity, budget: Budget, cap: Decimal, reason: str | None
) -> AskRequest:
    """The desk task that asks group :data:`BUDGET_APPROVERS` to raise ``budget``'s cap
    to ``cap`` (USD); it stays open :data:`BUDGET_REQUEST_TIMEOUT_S` seconds."""
    # Caps canonical, as a quote's amount (quote_ask): "3000" and "3000.00" are the same
    # requested cap, so one task (decisions 927, 943).
    detail = {
        "budgetId": budget.id,
        "currentCap": canonical_amount(budget.cap),
        "requestedCap": canonical_amount(cap),
        "currency": USD,
        "reason": reason,
    }
    return AskRequest(
        kind=TaskKind.BUDGET_INCREASE,
        wire="spend",
        scope=f"spend:{who.principal}",
        action={
            "method": "spend/budget-request",
            "name": "budget_increase",
            "arguments": detail,
        },
        requester=Requester(agent_id=who.principal, principal=who.owner or who.principal),
        approver_group=BUDGET_APPROVERS,
        question=f"Raise budget {budget.id} from {to_wire(budget.cap)} to "
        f"{to_wire(cap)} USD? Reason given: {reason or '(none)'}",
        timeout_s=BUDGET_REQUEST_TIMEOUT_S,
        correlation={"key_id": who.key_id},
        detail=detail,
    )


def file_budget_increase(desk: ApprovalDesk, tx: DeskTx, ask: AskRequest) -> Task:
    """File ``ask`` (:func:`budget_increase_ask`) in ``tx``, or answer with the same
    principal's identical request still pending (same budget, current and requested cap,
    reason): sent twice, one task (decision 927). A decided or lapsed one is not reused."""
    latest = tx.tasks.latest_for(ask.scope, action_hash(ask.action))
    if (
        latest is not None
        and latest.kind is TaskKind.BUDGET_INCREASE
        and latest.state is ApprovalState.PENDING
        and latest.expires_at > desk.now()
    ):
        return latest
    return desk.file(tx, ask)


def budget_increase_effect(engine: SpendEngine) -> Callable[[Any, Task], dict[str, Any]]:
    """What approving a budget increase does, inside the desk's transaction: the cap is
    raised (and chained on the budget tree's spend chain). Raises ``BudgetError`` when
    the new cap no longer fits (the approval then fails and nothing changes)."""

    def apply(tx: Any, task: Task) -> dict[str, Any]:
        eng = engine.within(tx)
        current = eng.path(task.detail["budgetId"])[0]
        eng.define_budget(replace(current, cap=Decimal(task.detail["requestedCap"])))
        return {
            "budgetId": current.id,
            "previousCap": to_wire(current.cap),
            "cap": task.detail["requestedCap"],
        }

    return apply
