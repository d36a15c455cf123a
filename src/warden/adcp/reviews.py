"""Human review of a ``check_governance`` on the approval desk (specs/adcp-spend-kla.md
§1.6 "Human review"): the check becomes an async task (``status: submitted``) in group
``finance`` for 24 h (or as the asking rule says); approving it holds the budget and
issues the token (:meth:`Reviews.on_approved`, the desk's effect), denying it, letting
it expire or withdrawing it resolves the check to ``denied`` (:meth:`Reviews.on_transition`,
the desk's listener) — each in the desk's transaction, with its audit entry naming the
reviewers.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from warden.adcp.check_answers import CheckAnswers, audit_detail
from warden.adcp.check_gates import (
    METHOD,
    REVIEW_GROUP,
    REVIEW_TIMEOUT_S,
    Judgement,
    PlanHold,
)
from warden.adcp.state import Answer, Call, new_id
from warden.adcp.verdicts import CheckInput, Evaluation
from warden.approvals.tasks import Event, Task
from warden.store.adcp_sql import CheckRow, PlanRow

__all__ = ["METHOD", "REVIEW_GROUP", "REVIEW_TIMEOUT_S", "Reviews"]


class Reviews(CheckAnswers):
    """Escalation to, and resolution from, the approval desk."""

    def _escalate(
        self,
        tx: Any,
        call: Call,
        plan_row: PlanRow,
        check: CheckInput,
        check_id: str,
        ev: Evaluation,
        task: Task,
        *,
        decided: dict[str, Any] | None = None,
    ) -> Answer:
        """Record a check that waits for its review: ``task`` was filed in ``tx`` by the
        :class:`~warden.adcp.check_gates.PlanReview` gate; the check row and its audit
        entry join it there."""
        record = self._record(call, check, check_id, sub=new_id("act"))
        record.update(
            task_id=task.id,
            review_reason=ev.review_reason,
            evaluation={
                "explanation": ev.explanation,
                "categories_evaluated": ev.categories_evaluated,
                "policies_evaluated": ev.policies_evaluated,
            },
        )
        body = {"check_id": check_id, "plan_id": plan_row.plan_id}
        self._store(
            tx, plan_row, check_id, "intent", body, record, {}, task_id=task.id, decided=decided
        )
        return Answer(
            {"check_id": check_id},
            status="submitted",
            task_id=task.id,
            message=f"A human reviews this check ({ev.review_reason}); poll get_task_status "
            f"with task_id {task.id}: it resolves to approved or denied.",
        )

    def on_approved(self, tx: Any, task: Task) -> dict[str, Any]:
        """The desk's effect for an approved review: hold the budget through the
        :class:`~warden.adcp.check_gates.PlanHold` gate and issue the token (or deny if
        the budget no longer has room), in the desk's transaction. Not a pipeline run:
        the policy decided ``ask`` when the check was made, and this is the human's
        answer to it (docs/decisions.md 672)."""
        st = self.st
        row = st.rows(tx).check(str(task.detail.get("check_id")))
        if row is None or row.verdict is not None:
            return {"check_id": task.detail.get("check_id"), "verdict": None}
        plan_row = st.rows(tx).plan(row.principal, row.plan_id)
        if plan_row is None:  # pragma: no cover - plans are never deleted
            return self._resolve_denied(tx, row, task, "the plan no longer exists")
        record = dict(row.record)
        req = record["request"]
        amount = None if record.get("amount") is None else Decimal(record["amount"])
        check = CheckInput(
            "intent",
            record.get("tool"),
            req.get("payload") if isinstance(req.get("payload"), dict) else {},
            amount,
            record.get("currency"),
            req.get("target_agent"),
        )
        evaluation = record.get("evaluation") or {}
        names = ", ".join(v.principal for v in task.approvals())
        ev = Evaluation(
            "approved",
            f"Approved by human review ({names}).",
            categories_evaluated=list(evaluation.get("categories_evaluated") or []),
            policies_evaluated=list(evaluation.get("policies_evaluated") or []),
        )
        modern = "proposed_commitment" in req
        # The same gate as an intent decided by the pipeline holds the money, here in
        # the desk's transaction; a ledger without room denies the check.
        hold = PlanHold(st, tx, plan_row, check, row.check_id, Judgement(ev, {}), modern=modern)
        ev = hold.hold(ev)
        if hold.refused is not None:
            body = self._refuse(row.check_id, plan_row.plan_id, "intent", ev, modern=modern)
            extra: dict[str, Any] = {}
        else:
            body, extra = self._approve(
                st.clock(),
                plan_row,
                row.check_id,
                req,
                check,
                ev,
                record["sub"],
                phase="intent",
                reservation_id=hold.reservation_id,
                modern=modern,
            )
        record.update(extra, response=body, reviewed_by=[v.to_dict() for v in task.approvals()])
        st.rows(tx).resolve_check(
            row.check_id,
            str(body["verdict"]),
            record,
            reservation_id=extra.get("reservation_id"),
            jti=extra.get("jti"),
        )
        st.audit(tx, row.principal, row.plan_id, "review_resolved", audit_detail(record, body))
        return {"check_id": row.check_id, "verdict": body["verdict"]}

    def on_transition(self, tx: Any, task: Task, event: Event, by: Any, reason: str) -> None:
        """The desk's listener: a denied, expired or withdrawn review denies the check."""
        if event not in (Event.DENIED, Event.EXPIRED, Event.CANCELED):
            return
        row = self.st.rows(tx).check(str(task.detail.get("check_id")))
        if row is None or row.verdict is not None:
            return
        who = f" by {by.principal}" if by is not None else ""
        why = {
            Event.DENIED: f"The human reviewer denied it{who}" + (f": {reason}" if reason else "."),
            Event.EXPIRED: "Nobody reviewed it in time.",
            Event.CANCELED: "The review was withdrawn.",
        }[event]
        self._resolve_denied(tx, row, task, why)

    def _resolve_denied(self, tx: Any, row: CheckRow, task: Task, why: str) -> dict[str, Any]:
        st = self.st
        finding = {"category_id": "human_review", "severity": "critical", "explanation": why}
        evaluation = row.record.get("evaluation") or {}
        ev = Evaluation(
            "denied",
            why,
            findings=[finding],
            categories_evaluated=list(evaluation.get("categories_evaluated") or []),
            policies_evaluated=list(evaluation.get("policies_evaluated") or []),
        )
        modern = "proposed_commitment" in row.record["request"]
        body = self._refuse(row.check_id, row.plan_id, row.check_type, ev, modern=modern)
        record = dict(row.record, response=body, reviewed_by=[v.to_dict() for v in task.votes])
        st.rows(tx).resolve_check(row.check_id, "denied", record, reservation_id=None, jti=None)
        st.audit(tx, row.principal, row.plan_id, "review_resolved", audit_detail(record, body))
        return {"check_id": row.check_id, "verdict": "denied"}
