"""An intent ``check_governance`` as pipeline gates: the human review it files and the
plan money it holds (issue 16; specs/adcp-spend-kla.md §1.6).

An intent check is decided by the plan's own rules (:func:`warden.adcp.verdicts.evaluate`)
and the bundle's rules on ``adcp/check_governance`` together: :class:`Judgement` joins
the two into the check's :class:`~warden.adcp.verdicts.Evaluation`. The pipeline then
runs two gates on the AdCP call's one store transaction, before the check's row and its
``warden/adcp.check`` entry are written in that same transaction:

- :class:`PlanReview` — a check a human must review files its task on the desk;
- :class:`PlanHold` — an approved check holds its commitment on the plan's budget in
  the spend ledger; a ledger without room (a concurrent commitment took it) tightens the
  verdict to a deny with a ``budget_authority`` finding.

So the task or the hold, the check row and the audit entry commit together or not at
all, and the verdict reaches the observers only after that commit.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from decimal import Decimal
from typing import Any

from warden.adcp.plans import Plan
from warden.adcp.state import AdcpState
from warden.adcp.verdicts import CheckInput, Evaluation
from warden.approvals.desk import AskRequest
from warden.approvals.tasks import Requester, Task, TaskKind
from warden.core.types import ActionRequest, Effect, Verdict
from warden.gates.approval import ask_terms, policy_of
from warden.identity.api_keys import Identity
from warden.spend.engine import MAX_HOLD_SECONDS
from warden.spend.errors import BudgetExceeded
from warden.store.adcp_sql import PlanRow

log = logging.getLogger(__name__)

METHOD = "adcp/check_governance"
#: Who reviews a plan-triggered escalation, and for how long the task stays open.
REVIEW_GROUP = "finance"
REVIEW_TIMEOUT_S = 24 * 3600


class Judgement:
    """The plan's evaluation ``plan_ev`` joined to the bundle's verdict: a deny (or a
    modify, which cannot be applied to a check) denies; an ask or a human-resolved defer
    escalates to review (after ``conditions``, which the re-check resolves first). Pure;
    the last answer is kept, since every gate asks about the same verdict."""

    def __init__(self, plan_ev: Evaluation, rule_effects: dict[str, Effect]) -> None:
        self.plan_ev = plan_ev
        self.rule_effects = rule_effects
        self._last: tuple[Verdict, Evaluation] | None = None

    def __call__(self, verdict: Verdict) -> Evaluation:
        if self._last is not None and self._last[0] is verdict:
            return self._last[1]
        ev = self._judge(verdict)
        self._last = (verdict, ev)
        return ev

    def _judge(self, verdict: Verdict) -> Evaluation:
        rules = [r.rule_id for r in verdict.policy_references]
        ev = replace(self.plan_ev, policies_evaluated=[*self.plan_ev.policies_evaluated, *rules])
        if verdict.decision is Effect.ALLOW:
            return ev
        if verdict.decision in (Effect.ASK, Effect.DEFER):
            if ev.kind == "conditions":
                return ev  # conditions first; the re-check asks the human
            why = verdict.reasoning or "a policy rule asks a human to review this action"
            return replace(
                ev, kind="review", explanation=f"A human must review: {why}", review_reason=why
            )
        winner = next((r for r in rules if self.rule_effects.get(r) is verdict.decision), None)
        finding: dict[str, Any] = {
            "category_id": "policy",
            "severity": "critical",
            "explanation": verdict.reasoning or "denied by policy",
        }
        if winner is not None:
            finding["policy_id"] = winner
        return Evaluation(
            "denied",
            finding["explanation"],
            findings=[finding],
            categories_evaluated=[*ev.categories_evaluated, "policy"],
            policies_evaluated=ev.policies_evaluated,
        )


def review_ask(
    st: AdcpState,
    who: Identity,
    plan_row: PlanRow,
    check: CheckInput,
    check_id: str,
    ev: Evaluation,
    verdict: Verdict | None,
) -> AskRequest:
    """The desk task of a check a human must review: group :data:`REVIEW_GROUP` for
    :data:`REVIEW_TIMEOUT_S`, or as the asking rule says (unanswered is always denied)."""
    terms: dict[str, Any] = {
        "approver_group": REVIEW_GROUP,
        "question": f"Approve this {check.tool or 'governed action'} on plan "
        f"{plan_row.plan_id}? {ev.review_reason}",
        "timeout_s": float(REVIEW_TIMEOUT_S),
        "timeout_disposition": "deny",
        "approvals_required": 1,
    }
    if verdict is not None and verdict.decision in (Effect.ASK, Effect.DEFER):
        terms = ask_terms(st.guardian, verdict)
        terms["timeout_disposition"] = "deny"  # an unanswered review is a denial
    detail = {
        "check_id": check_id,
        "plan_id": plan_row.plan_id,
        "tool": check.tool,
        "amount": None if check.amount is None else str(check.amount),
        "currency": check.currency,
        "target_agent": check.target_agent,
        "reason": ev.review_reason,
    }
    return AskRequest(
        kind=TaskKind.ADCP_CHECK,
        wire="adcp",
        scope=f"adcp:{who.principal}",
        action={"method": METHOD, "name": check.tool or "check_governance", "arguments": detail},
        requester=Requester(agent_id=who.principal, principal=who.owner or who.principal),
        correlation={"check_id": check_id, "key_id": who.key_id},
        policy=policy_of(verdict) if verdict is not None else {},
        detail=detail,
        **terms,
    )


def hold_commitment(
    st: AdcpState, tx: Any, plan_row: PlanRow, check: CheckInput, check_id: str
) -> str | None:
    """Hold ``check``'s commitment on the plan's budget in ``tx``; the reservation id,
    or None when there is nothing to hold (no positive amount). Raises
    :class:`BudgetExceeded` when the ledger has no room."""
    if check.amount is None or check.amount <= 0:
        return None
    plan = Plan.from_record(plan_row.record)
    res = st.engine.within(tx).reserve(
        plan_row.budget_id,
        check.amount,
        check.currency or plan.currency,
        action=f"adcp:{check.tool or 'check_governance'}",
        hold_seconds=MAX_HOLD_SECONDS,
        meta={"wire": "adcp", "check_id": check_id, "plan_id": plan.plan_id},
        principal=plan_row.principal,
    )
    return res.id


def no_room(amount: Decimal | None, currency: str, ev: Evaluation) -> Evaluation:
    """The ``denied`` evaluation of a hold the ledger refused. The ledger's message names
    its internal budget id: not for the wire."""
    finding = {
        "category_id": "budget_authority",
        "severity": "critical",
        "explanation": f"The plan's budget no longer has room for {amount} "
        f"{currency}: other commitments took it since the check was made.",
    }
    return Evaluation(
        "denied",
        finding["explanation"],
        findings=[finding],
        categories_evaluated=ev.categories_evaluated,
        policies_evaluated=ev.policies_evaluated,
    )


class PlanReview:
    """The gate that files the review task of a check a human must review, in ``tx``."""

    def __init__(
        self,
        st: AdcpState,
        tx: Any,
        who: Identity,
        plan_row: PlanRow,
        check: CheckInput,
        check_id: str,
        judge: Judgement,
    ) -> None:
        self.st, self.tx, self.who = st, tx, who
        self.plan_row, self.check, self.check_id = plan_row, check, check_id
        self.judge = judge
        #: The task filed (after the pipeline ran), and the evaluation it reviews.
        self.task: Task | None = None
        self.evaluation: Evaluation | None = None

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return self.task is None and self.judge(verdict).kind == "review"

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        ev = self.judge(verdict)
        ask = review_ask(self.st, self.who, self.plan_row, self.check, self.check_id, ev, verdict)
        self.task = self.st.desk.file(self.tx, ask)
        self.evaluation = ev
        return verdict

    def holding(self) -> bool:
        return False  # the task is part of the transaction, and rolls back with it

    def abandon(self, why: str) -> None:
        """Nothing outside the transaction to give back."""


class PlanHold:
    """The gate that holds an approved check's commitment on the plan's budget, in
    ``tx`` (``modern``: the request carries ``proposed_commitment``, so ``conditions``
    is a verdict of its own and holds nothing)."""

    def __init__(
        self,
        st: AdcpState,
        tx: Any,
        plan_row: PlanRow,
        check: CheckInput,
        check_id: str,
        judge: Judgement,
        *,
        modern: bool,
    ) -> None:
        self.st, self.tx = st, tx
        self.plan_row, self.check, self.check_id = plan_row, check, check_id
        self.judge = judge
        self.modern = modern
        #: The reservation held, and the ``denied`` evaluation when the ledger had no room.
        self.reservation_id: str | None = None
        self.refused: Evaluation | None = None

    def approves(self, ev: Evaluation) -> bool:
        """Whether the check is answered with a token (and so holds its commitment)."""
        return ev.kind == "approved" or (ev.kind == "conditions" and not self.modern)

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        if self.reservation_id is not None or self.refused is not None:
            return False
        amount = self.check.amount
        return amount is not None and amount > 0 and self.approves(self.judge(verdict))

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def hold(self, ev: Evaluation) -> Evaluation:
        """Hold the commitment of the approved evaluation ``ev`` in ``tx``: ``ev`` once
        held (or when there is nothing to hold), else the ``denied`` evaluation of a
        ledger without room (also :attr:`refused`). The pipeline calls it through
        :meth:`apply`; the desk's effect for a human-approved review calls it directly
        (:meth:`warden.adcp.reviews.Reviews.on_approved`: the human answered the
        policy's ``ask``, nothing is decided again)."""
        try:
            self.reservation_id = hold_commitment(
                self.st, self.tx, self.plan_row, self.check, self.check_id
            )
        except BudgetExceeded:
            currency = self.check.currency or Plan.from_record(self.plan_row.record).currency
            self.refused = no_room(self.check.amount, currency, ev)
            return self.refused
        return ev

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        self.hold(self.judge(verdict))
        if self.refused is not None:
            return Verdict(
                decision=Effect.DENY,
                reasoning=self.refused.explanation,
                reason_codes=("budget_exceeded",),
                policy_references=verdict.policy_references,
                bundle=verdict.bundle,
                policy_data=verdict.policy_data,
            )
        return verdict

    def holding(self) -> bool:
        return self.reservation_id is not None

    def abandon(self, why: str) -> None:
        """Release the hold in ``tx`` (a later gate denied the step). Never raises: if the
        transaction is failing, the hold rolls back with it."""
        rid, self.reservation_id = self.reservation_id, None
        if rid is None:
            return
        try:
            self.st.engine.within(self.tx).release(rid, reason="check_denied")
        except Exception:  # noqa: BLE001 - the transaction's own outcome decides
            log.warning("could not release hold %s (%s); it rolls back or expires", rid, why)
