"""``check_governance``: intent and execution checks, their verdicts, and the human
review that resolves one (specs/adcp-spend-kla.md §1.6, §1.7).

**Intent** (``plan_id + tool + payload``, from the buyer): the plan's rules
(:func:`warden.adcp.verdicts.evaluate`) then the bundle's rules on
``adcp/check_governance`` decide. ``approved`` holds the commitment on the plan's budget
in the spend ledger (the same ledger as the spend wire) and returns a signed
``governance_context`` (phase ``intent``, 15 minutes) binding the exact payload, task,
seller and ceiling; ``conditions`` returns a ``consultation_context`` to re-check with;
``denied`` returns findings. When the plan requires human review, a reallocation
exceeds ``reallocation_threshold``, or a rule asks, the check becomes an async task on
the approval desk (``status: submitted``): approving it holds the budget and issues the
token, denying (or letting it expire) makes the verdict ``denied``; the buyer polls
``get_task_status``.

**Execution** (``governance_context + planned_delivery``, from the seller): the token
must be one this agent issued; the planned commitment must fit the authorized ceiling,
the flight and the sellers. Only ``approved`` (a fresh execution-phase token, no new
hold: the intent's hold covers it) or ``denied``.

Each verdict is one ``adcp_checks`` row and one ``warden/adcp.check`` audit entry on the
plan's chain, in the transaction of its effect.
"""

from __future__ import annotations

from typing import Any

from warden.adcp.check_gates import METHOD, Judgement, PlanHold, PlanReview
from warden.adcp.errors import AdcpError
from warden.adcp.execution import Executions
from warden.adcp.plans import Plan
from warden.adcp.reviews import Reviews
from warden.adcp.state import Answer, Call, new_id, wire_number
from warden.adcp.verdicts import CheckInput, Evaluation, commitment_of, evaluate
from warden.core.pipeline import Pipeline
from warden.core.types import ActionRequest, Verdict
from warden.errors import CouldNotDecide, StoreUnavailable
from warden.identity.api_keys import Identity
from warden.ledger.decided import caller_record, verdict_record
from warden.store.adcp_sql import PlanRow


class Checks(Reviews, Executions):
    """check_governance over the shared :class:`AdcpState`."""

    # -- entry --------------------------------------------------------------------------

    def check_governance(self, call: Call, tx: Any) -> Answer:
        req = call.request
        if "plan_id" in req and "governance_context" in req:
            raise AdcpError(
                "INVALID_REQUEST",
                "send plan_id (an intent check) or governance_context (an execution "
                "check), not both",
                field="governance_context",
            )
        if "governance_context" in req:
            return self._execution(call, tx)
        if "push_notification_config" in req:
            # An intent check may answer `submitted`, and Warden sends no AdCP push
            # notifications: refused rather than accepted and never delivered (decision 1008).
            raise AdcpError(
                "UNSUPPORTED_FEATURE",
                "this governance agent does not deliver push notifications: send the check "
                "without push_notification_config and poll get_task_status with the task_id "
                "of a submitted answer",
                field="push_notification_config",
            )
        return self._intent(call, tx)

    # -- intent -------------------------------------------------------------------------

    def _intent(self, call: Call, tx: Any) -> Answer:
        st, req, who = self.st, call.request, call.who
        plan_row = st.plan(tx, who.principal, str(req["plan_id"]))
        plan = Plan.from_record(plan_row.record)
        consult = req.get("consultation_context")
        if consult is not None:
            prior = st.rows(tx).check_by("consultation_context", str(consult))
            if prior is None or (prior.principal, prior.plan_id) != (who.principal, plan.plan_id):
                raise AdcpError(
                    "REFERENCE_NOT_FOUND",
                    f"no consultation {consult!r}",
                    field="consultation_context",
                )
        _, _, remaining = st.budget_state(tx, plan_row.budget_id)
        check = intent_input(req, plan.currency)
        ev = evaluate(plan, check, remaining, call.now)
        check_id = new_id("chk")
        modern = "proposed_commitment" in req
        held: str | None = None
        decided: dict[str, Any] | None = None  # a plan denial is final and asks no rule
        if ev.kind != "denied":
            ev, review, hold, decided = self._decide(tx, call, plan_row, plan, check, check_id, ev)
            if review.task is not None:
                return self._escalate(
                    tx, call, plan_row, check, check_id, ev, review.task, decided=decided
                )
            held = hold.reservation_id
        record = self._record(call, check, check_id, sub=new_id("act"))
        if ev.kind == "approved" or (ev.kind == "conditions" and not modern):
            body, extra = self._approve(
                call.now,
                plan_row,
                check_id,
                req,
                check,
                ev,
                record["sub"],
                phase="intent",
                reservation_id=held,
                modern=modern,
            )
        else:
            body, extra = self._refuse(check_id, plan.plan_id, "intent", ev, modern=modern), {}
        record.update(extra, response=body)
        self._store(tx, plan_row, check_id, "intent", body, record, extra, decided=decided)
        return Answer(body)

    def _decide(
        self,
        tx: Any,
        call: Call,
        plan_row: PlanRow,
        plan: Plan,
        check: CheckInput,
        check_id: str,
        ev: Evaluation,
    ) -> tuple[Evaluation, PlanReview, PlanHold, dict[str, Any]]:
        """The pipeline on ``adcp/check_governance`` with the check's gates
        (:mod:`warden.adcp.check_gates`) on the call's transaction ``tx``: the review
        task or the plan money is taken there, before the check's row and audit entry
        join it. Returns the check's evaluation (the plan's joined to the bundle's
        verdict, or ``denied`` when the ledger had no room), the gates, and what the
        check's entry records of the decision (:func:`decided_record`)."""
        st, req, who = self.st, call.request, call.who
        request = check_request(who, req, plan.plan_id, plan.currency, check)
        judge = Judgement(ev, {r.id: r.effect for r in st.guardian.engine.bundle.rules})
        review = PlanReview(st, tx, who, plan_row, check, check_id, judge)
        hold = PlanHold(
            st, tx, plan_row, check, check_id, judge, modern="proposed_commitment" in req
        )
        pipeline = Pipeline(st.guardian)
        try:
            decided = pipeline.run(who.as_principal(), request, gates=[review, hold])
        except StoreUnavailable:
            raise  # the call's transaction rolls back; the wire answers "unavailable"
        except CouldNotDecide as exc:
            raise AdcpError(
                "GOVERNANCE_UNAVAILABLE", "the governance agent could not decide", retry_after=5
            ) from exc
        pipeline.finished_after(tx, "adcp", decided)
        record = decided_record(who, req, plan, decided.verdict, refused=hold.refused is not None)
        if hold.refused is not None:
            return hold.refused, review, hold, record
        return judge(decided.verdict), review, hold, record


def intent_input(req: dict[str, Any], plan_currency: str) -> CheckInput:
    """What an intent check asks (its commitment, in the plan's currency when the
    request names none), from the check's request."""
    amount, currency = commitment_of(req)
    raw_payload = req.get("payload")
    payload: dict[str, Any] = raw_payload if isinstance(raw_payload, dict) else {}
    return CheckInput(
        check_type="intent",
        tool=req.get("tool"),
        payload=payload,
        amount=amount,
        currency=currency or plan_currency,
        target_agent=req.get("target_agent"),
        phase=str(req.get("phase") or "purchase"),
        payload_amount=commitment_of({"payload": payload})[0],
    )


def check_request(
    who: Identity,
    req: dict[str, Any],
    plan_id: str,
    plan_currency: str,
    check: CheckInput | None = None,
) -> ActionRequest:
    """The ``adcp/check_governance`` request the Guardian decides for an intent check
    ``req`` on plan ``plan_id`` (``check``: :func:`intent_input` of it, computed when
    not given): ``payload`` the request as received, ``args`` the check's vocabulary
    (docs/policy-bundles.md)."""
    check = check if check is not None else intent_input(req, plan_currency)
    return ActionRequest(
        method=METHOD,
        payload=dict(req),
        metadata={"principal": who.principal},
        tool={
            "name": check.tool or "check_governance",
            "version": "",
            "provider": "adcp",
            "operation": "",
            "capability": "governance",
        },
        args={
            "plan_id": plan_id,
            "check_type": check.check_type,
            "tool": check.tool or "",
            "amount": None if check.amount is None else wire_number(check.amount),
            "currency": check.currency or plan_currency,
            "target_agent": check.target_agent or "",
            "purchase_type": str(req.get("purchase_type") or "media_buy"),
            "caller": str(req.get("caller") or ""),
        },
        raw_command="",
        session={"id": "", "agent_id": who.principal, "step_count": 0},
    )


def decided_record(
    who: Identity, req: dict[str, Any], plan: Plan, verdict: Verdict, *, refused: bool
) -> dict[str, Any]:
    """The additive ``decided`` object of an intent check's ``warden/adcp.check`` entry
    (docs/decisions.md 600): the caller, the request as received, the plan's id and
    currency (what :func:`check_request` reads of the plan), and the pipeline's verdict
    (``spend.refused`` when the plan's budget had no room for what policy allowed)."""
    return {
        "caller": caller_record(who),
        "request": dict(req),
        "plan": {"plan_id": plan.plan_id, "currency": plan.currency},
        "verdict": verdict_record(verdict, refused="budget_exceeded" if refused else None),
    }


__all__ = ["Checks", "check_request", "decided_record", "intent_input"]
