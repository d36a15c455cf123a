"""How a ``check_governance`` verdict is written: the approval (the signed
``governance_context`` over the hold the :class:`~warden.adcp.check_gates.PlanHold` gate
took), the refusals (``denied`` with findings, ``conditions`` with a
consultation handle), the ``adcp_checks`` row and its ``warden/adcp.check`` audit entry —
shared by intent checks (:mod:`.checks`), human reviews (:mod:`.reviews`) and execution
checks (:mod:`.execution`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from warden.adcp.governance_token import (
    MAX_INTENT_TTL_SECONDS,
    Commitment,
    PolicyDecision,
    new_jti,
)
from warden.adcp.plan_hash import authorized_payload_hash
from warden.adcp.plans import Plan
from warden.adcp.state import AdcpState, Call, new_id, rfc3339
from warden.adcp.verdicts import CheckInput, Evaluation
from warden.store.adcp_sql import CheckRow, PlanRow


class CheckAnswers:
    """Writes verdicts over the shared :class:`AdcpState`."""

    def __init__(self, st: AdcpState) -> None:
        self.st = st

    def _record(self, call: Call, check: CheckInput, check_id: str, *, sub: str) -> dict[str, Any]:
        req = call.request
        return {
            "check_id": check_id,
            "request": {k: v for k, v in req.items() if k != "context"},
            "requested_by": call.who.principal,
            "key_id": call.who.key_id,
            "tool": check.tool,
            "amount": None if check.amount is None else str(check.amount),
            "currency": check.currency,
            "caller": req.get("caller"),
            "sub": sub,
            "created_at": rfc3339(call.now),
        }

    def _approve(
        self,
        now: datetime,
        plan_row: PlanRow,
        check_id: str,
        req: dict[str, Any],
        check: CheckInput,
        ev: Evaluation,
        sub: str,
        *,
        phase: str,
        reservation_id: str | None = None,
        aud: str | None = None,
        media_buy_id: str | None = None,
        modern: bool = True,
        binding: tuple[str, str] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Sign the token of an approved check. The commitment is already held by the
        :class:`~warden.adcp.check_gates.PlanHold` gate (``reservation_id``; in the
        pipeline for an intent, in the desk's transaction for a reviewed one); an
        execution check holds nothing (the intent's hold covers it).

        ``binding``: the ``(authorized_task, authorized_payload_hash)`` an execution
        token carries over from the intent's token (the seller commits that request), so
        every token Warden issues passes a seller's step 12 (§1.7)."""
        st = self.st
        plan = Plan.from_record(plan_row.record)
        currency = check.currency or plan.currency
        jti = new_jti()
        iat = int(now.timestamp())
        ttl = MAX_INTENT_TTL_SECONDS if phase == "intent" else 30 * 24 * 3600
        exp = iat + ttl
        payload = req.get("payload")
        task: str | None = None
        payload_hash: str | None = None
        if binding is not None:
            task, payload_hash = binding
        elif isinstance(payload, dict) and check.tool:
            task, payload_hash = check.tool, authorized_payload_hash(payload)
        decisions = [PolicyDecision(p, "pass") for p in ev.policies_evaluated] or [
            PolicyDecision("warden:plan", "pass")
        ]
        token = st.signer.issue(
            sub=sub,
            aud=aud or str(req.get("target_agent") or req.get("caller")),
            caller=str(req.get("caller")),
            check_id=check_id,
            plan_hash=plan_row.plan_hash,
            phase=phase,  # type: ignore[arg-type]
            now=iat,
            exp=exp,
            jti=jti,
            media_buy_id=media_buy_id,
            authorized_commitment=None
            if check.amount is None
            else Commitment(check.amount, currency),
            authorized_task=task,
            authorized_payload_hash=payload_hash,
            policy_decisions=decisions,
        )
        body: dict[str, Any] = {
            "check_id": check_id,
            "verdict": "conditions" if ev.kind == "conditions" else "approved",
            "check_type": check_type_of(phase),
            "plan_id": plan.plan_id,
            "explanation": ev.explanation,
            "mode": "enforce",
            "categories_evaluated": ev.categories_evaluated,
            "policies_evaluated": ev.policies_evaluated,
            "expires_at": rfc3339(datetime.fromtimestamp(exp, UTC)),
            "governance_context": token,
        }
        if not modern:
            del body["check_type"]
        if ev.conditions:
            body["conditions"] = ev.conditions
        if ev.findings:
            body["findings"] = ev.findings
        return body, {"reservation_id": reservation_id, "jti": jti, "exp": exp}

    @staticmethod
    def _refuse(
        check_id: str, plan_id: str, check_type: str, ev: Evaluation, *, modern: bool = True
    ) -> dict[str, Any]:
        """A verdict without authorization: ``denied`` with findings, or (modern shape)
        ``conditions`` with a consultation handle."""
        body: dict[str, Any] = {
            "check_id": check_id,
            "verdict": ev.kind,
            "check_type": check_type,
            "plan_id": plan_id,
            "explanation": ev.explanation,
            "mode": "enforce",
            "categories_evaluated": ev.categories_evaluated,
            "policies_evaluated": ev.policies_evaluated,
        }
        if ev.findings:
            body["findings"] = ev.findings
        if ev.kind == "conditions":
            body["conditions"] = ev.conditions
            body["consultation_context"] = new_id("consult")
        if not modern:
            del body["check_type"]
        return body

    def _store(
        self,
        tx: Any,
        plan_row: PlanRow,
        check_id: str,
        check_type: str,
        body: dict[str, Any],
        record: dict[str, Any],
        extra: dict[str, Any],
        *,
        task_id: str | None = None,
        decided: dict[str, Any] | None = None,
    ) -> None:
        """The check's row and its ``warden/adcp.check`` entry, in ``tx``. ``decided``:
        what the entry records of the bundle's decision for ``warden whatif``
        (:func:`warden.adcp.checks.decided_record`); null on a check policy was not
        asked about (an execution check, a plan's own denial)."""
        st = self.st
        verdict = body.get("verdict")
        st.rows(tx).insert_check(
            CheckRow(
                check_id=check_id,
                principal=plan_row.principal,
                plan_id=plan_row.plan_id,
                check_type=check_type,
                verdict=verdict,
                reservation_id=extra.get("reservation_id"),
                task_id=task_id,
                consultation_context=body.get("consultation_context"),
                jti=extra.get("jti"),
                record=record,
                created_at=record["created_at"],
            )
        )
        detail = audit_detail(record, body)
        detail["decided"] = decided
        st.audit(tx, plan_row.principal, plan_row.plan_id, "check", detail)


def check_type_of(phase: str) -> str:
    return "intent" if phase == "intent" else "execution"


def audit_detail(record: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """What the plan's chain keeps of a check (AdCP §1.6 "Audit": time, tool, commitment,
    outcome, human review and reviewer, check id)."""
    return {
        "check_id": record["check_id"],
        "check_type": body.get("check_type"),
        "verdict": body.get("verdict"),
        "tool": record.get("tool"),
        "amount": record.get("amount"),
        "currency": record.get("currency"),
        "caller": record.get("caller"),
        "requested_by": record.get("requested_by"),
        "task_id": record.get("task_id"),
        "human_reviewed": "reviewed_by" in record,
        "reviewed_by": record.get("reviewed_by"),
        "reservation_id": record.get("reservation_id"),
        "jti": record.get("jti"),
        "findings": body.get("findings"),
        "conditions": body.get("conditions"),
    }
