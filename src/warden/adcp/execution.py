"""Execution checks: the seller's ``check_governance`` with the ``governance_context``
this agent issued and the ``planned_delivery`` it prepared (specs/adcp-spend-kla.md
§1.6 step 4). Authorized by the token, recorded on the buyer's plan; only ``approved``
(a fresh purchase/modification/delivery token, no new hold: the intent's covers it) or
``denied``. Delivery-phase checks keep the seller's canonical statement for
reconciliation (:mod:`.delivery`) and warn about drift.
"""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal
from typing import Any

from warden.adcp.check_answers import CheckAnswers
from warden.adcp.delivery import statement_of
from warden.adcp.errors import AdcpError
from warden.adcp.plans import Plan
from warden.adcp.state import Answer, Call, new_id
from warden.adcp.verdicts import CheckInput, Evaluation, commitment_of, evaluate


class Executions(CheckAnswers):
    """The seller's execution checks."""

    def _execution(self, call: Call, tx: Any) -> Answer:
        st, req = self.st, call.request
        claims = st.token_claims(str(req["governance_context"]))
        origin = st.rows(tx).check_by("jti", str(claims.get("jti")))
        if origin is None:
            raise AdcpError(
                "REFERENCE_NOT_FOUND",
                "no governed action for this governance_context",
                field="governance_context",
            )
        if req.get("caller") != claims.get("aud"):
            # The token authorizes one seller (its aud, the intent's target_agent, checked
            # against the plan's approved_sellers below). Warden has no map from an API
            # key's principal to a seller URL, so the caller must at least be that seller;
            # anything else is answered exactly as an unknown token (nothing disclosed).
            raise AdcpError(
                "REFERENCE_NOT_FOUND",
                "no governed action for this governance_context",
                field="governance_context",
            )
        intent = origin
        if origin.check_type == "execution":
            found = st.rows(tx).check(str(origin.record.get("intent_check_id")))
            intent = found if found is not None else origin
        plan_row = st.rows(tx).plan(origin.principal, origin.plan_id)
        if plan_row is None:  # pragma: no cover - plans are never deleted
            raise AdcpError("PLAN_NOT_FOUND", "no plan for this governance_context")
        plan = Plan.from_record(plan_row.record)
        if call.stated_plan_id is not None and call.stated_plan_id != plan.plan_id:
            raise AdcpError(
                "INVALID_REQUEST",
                "plan_id names another plan than the governance_context's",
                field="plan_id",
            )
        amount, currency = commitment_of(req)
        authorized = (
            Decimal(intent.record["amount"]) if intent.record.get("amount") is not None else None
        )
        phase = str(req.get("phase") or req.get("governance_phase") or "purchase")
        check = CheckInput(
            "execution",
            claims.get("authorized_task"),
            {},
            amount if amount is not None else authorized,
            currency or plan.currency,
            str(claims.get("aud")),
            phase=phase,
        )
        room = authorized if authorized is not None else Decimal(math.inf)
        ev = evaluate(plan, check, room, call.now)
        if ev.kind in ("conditions", "review"):  # decided at intent; execution is binary
            ev = replace(ev, kind="approved", conditions=[], review_reason=None)
        exp = claims.get("exp")
        if isinstance(exp, int) and phase == "purchase" and exp < int(call.now.timestamp()):
            ev = Evaluation(
                "denied",
                "The intent authorization expired before the seller's execution check.",
                findings=[
                    {
                        "category_id": "authorization",
                        "severity": "critical",
                        "explanation": "The governance_context has expired.",
                    }
                ],
                categories_evaluated=ev.categories_evaluated,
                policies_evaluated=ev.policies_evaluated,
            )
        settled = phase == "purchase" and any(
            o.settles == intent.check_id
            for o in st.rows(tx).outcomes(plan_row.principal, plan.plan_id)
        )
        if settled and ev.kind == "approved":
            ev = Evaluation(
                "denied",
                "This governed action already has a terminal outcome.",
                findings=[
                    {
                        "category_id": "authorization",
                        "severity": "critical",
                        "explanation": "The action was already settled or reported failed.",
                    }
                ],
            )
        if phase == "delivery" and ev.kind == "approved":
            ev.findings = [*ev.findings, *_drift(req)]
        check_id = new_id("chk")
        record = self._record(call, check, check_id, sub=str(claims.get("sub")))
        record["intent_check_id"] = intent.check_id
        statement = statement_of(req)
        if statement is not None:
            record["delivery_statement"] = statement
        raw_planned = req.get("planned_delivery")
        planned: dict[str, Any] = raw_planned if isinstance(raw_planned, dict) else {}
        if ev.kind == "approved":
            body, extra = self._approve(
                call.now,
                plan_row,
                check_id,
                req,
                check,
                ev,
                str(claims.get("sub")),
                phase=phase,
                aud=str(claims.get("aud")),
                media_buy_id=planned.get("media_buy_id") if phase != "purchase" else None,
                binding=_binding(claims),
            )
        else:
            if call.who.principal != origin.principal:
                ev = _redacted(ev)  # a seller's key: the buyer's plan figures stay private
            body, extra = self._refuse(check_id, plan.plan_id, "execution", ev), {}
        record.update(extra, response=body)
        self._store(tx, plan_row, check_id, "execution", body, record, extra)
        return Answer(body)


#: What a denial tells a caller that does not own the plan, per finding category.
REDACTED = {
    "budget_authority": "The planned commitment is not within what this governance_context "
    "authorizes.",
    "flight": "The action falls outside the plan's flight.",
    "seller_authorization": "This seller is not authorized by the plan.",
    "authorization": "The governance_context no longer authorizes this action.",
}


def _redacted(ev: Evaluation) -> Evaluation:
    """``ev`` without the buyer's figures (totals, remaining, currency details): each
    finding keeps its category and severity and gets a generic explanation."""
    findings = [
        {
            "category_id": f["category_id"],
            "severity": f["severity"],
            "explanation": REDACTED.get(
                str(f["category_id"]), "The plan does not allow this action."
            ),
        }
        for f in ev.findings
    ]
    return replace(
        ev,
        explanation=" ".join(dict.fromkeys(f["explanation"] for f in findings))
        or "The plan does not allow this action.",
        findings=findings,
    )


def _binding(claims: dict[str, Any]) -> tuple[str, str] | None:
    """The intent token's task and payload binding, carried into the execution token."""
    task, digest = claims.get("authorized_task"), claims.get("authorized_payload_hash")
    if isinstance(task, str) and isinstance(digest, str):
        return task, digest
    return None


def _drift(req: dict[str, Any]) -> list[dict[str, Any]]:
    """Warnings a delivery check raises without denying: pacing off plan, and spend in
    channels the planned delivery does not name."""
    metrics = req.get("delivery_metrics") if isinstance(req.get("delivery_metrics"), dict) else {}
    planned = req.get("planned_delivery") if isinstance(req.get("planned_delivery"), dict) else {}
    out: list[dict[str, Any]] = []
    pacing = metrics.get("pacing") if isinstance(metrics, dict) else None
    if pacing in ("ahead", "behind"):
        out.append(
            {
                "category_id": "budget_drift",
                "severity": "warning",
                "explanation": f"Delivery is pacing {pacing} of plan.",
                "details": {"pacing": pacing},
            }
        )
    mix = metrics.get("channel_distribution") if isinstance(metrics, dict) else None
    channels = planned.get("channels") if isinstance(planned, dict) else None
    if isinstance(mix, dict) and isinstance(channels, list):
        strays = sorted(str(c) for c in mix if c not in channels)
        if strays:
            out.append(
                {
                    "category_id": "channel_drift",
                    "severity": "warning",
                    "explanation": "Spend was delivered in channels the planned delivery does "
                    "not name: " + ", ".join(strays) + ".",
                    "details": {"channels": strays},
                }
            )
    return out
