"""``report_plan_adjustment``: after a completed outcome, the seller reports money that
comes back (a decommitment, refund, credit or makegood) and the plan owner reviews it
(AdCP 3.2 governance; the delivery-monitor storyboard).

- ``action: report`` records the adjustment as ``reported``: nothing changes in the
  accounting until it is reviewed. The outcome must be this plan's completed outcome (a
  delivery observation's ``outcome_id`` stands for its action's completed outcome);
  anything else is ``REFERENCE_NOT_FOUND``, the same for absent and another caller's.
  Cumulative reported adjustments of an outcome may not exceed what it committed
  (``VALIDATION_ERROR``), nor may the currency differ.
- Who: every call acts on the caller's own plans, so the seller reports with the API
  key the buyer issued it for the plan (AdCP's sync_governance credential: a key of the
  buyer's principal) and the buyer reviews with its own key. ``seller_reference`` must
  be the one the completed outcome reported (``REFERENCE_NOT_FOUND`` otherwise).
- Maker-checker: the key that reported a headroom-restoring adjustment may not accept
  it (``PERMISSION_DENIED``), except in compliance-testing mode
  (``--adcp-test-controller``, where the runner holds one key; recorded as
  ``self_reviewed``).
- ``action: review`` with ``decision: accept`` verifies it — refused with ``CONFLICT``
  while the action's latest delivery observation for some open period is disputed
  (:func:`warden.adcp.delivery.blocking_dispute`) — and, for the types that
  restore headroom (:mod:`.plan_money`), gives the amount back to the plan's budget in
  the spend ledger; ``dispute`` marks it disputed. A review of an adjustment no longer
  ``reported`` is ``INVALID_STATE``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from warden.adcp.delivery import blocking_dispute
from warden.adcp.errors import AdcpError
from warden.adcp.plan_money import apply_cap, plan_money, restores
from warden.adcp.plans import Plan, to_decimal
from warden.adcp.state import AdcpState, Answer, Call, new_id, rfc3339, wire_number
from warden.store.adcp_sql import AdjustmentRow, OutcomeRow


def report_plan_adjustment(st: AdcpState, call: Call, tx: Any) -> Answer:
    req, who = call.request, call.who.principal
    row = st.plan(tx, who, str(req["plan_id"]))
    if req["action"] == "report":
        return _report(st, call, tx, row)
    return _review(st, call, tx, row)


def _completed(outcomes: list[OutcomeRow], outcome_id: str) -> OutcomeRow:
    named = next((o for o in outcomes if o.outcome_id == outcome_id), None)
    action = None if named is None else named.record.get("action_check_id")
    done = next(
        (o for o in outcomes if o.outcome == "completed" and o.settles == action),
        None,
    )
    if named is None or action is None or done is None:
        raise AdcpError("REFERENCE_NOT_FOUND", f"no outcome {outcome_id!r}", field="outcome_id")
    return done


def _report(st: AdcpState, call: Call, tx: Any, row: Any) -> Answer:
    req = call.request
    rows = st.rows(tx)
    plan = Plan.from_record(row.record)
    done = _completed(rows.outcomes(row.principal, row.plan_id), str(req["outcome_id"]))
    amount = to_decimal(req["amount"]["amount"])
    if req["amount"]["currency"] != plan.currency:
        raise AdcpError(
            "VALIDATION_ERROR",
            f"the adjustment is in {req['amount']['currency']}; the plan is in {plan.currency}",
            field="amount.currency",
        )
    retained = ((done.record.get("request") or {}).get("seller_response") or {}).get(
        "seller_reference"
    )
    if req["seller_reference"] != retained:
        # The schema: it "must exactly match the reference retained on the source outcome".
        raise AdcpError(
            "REFERENCE_NOT_FOUND",
            "seller_reference does not match the reference the completed outcome reported",
            field="seller_reference",
        )
    committed = Decimal(str(done.record.get("committed_budget") or 0))
    earlier = sum(
        (
            to_decimal(a.record["amount"]["amount"])
            for a in rows.adjustments(row.principal, row.plan_id)
            if a.outcome_id == done.outcome_id and a.state != "disputed"
        ),
        Decimal(0),
    )
    if earlier + amount > committed:
        raise AdcpError(
            "VALIDATION_ERROR",
            f"adjustments reported against outcome {done.outcome_id} would total "
            f"{earlier + amount}, more than the {committed} it committed",
            field="amount.amount",
        )
    adjustment_id = new_id("adj")
    record = {
        "adjustment_id": adjustment_id,
        "adjustment_type": req["adjustment_type"],
        "amount": req["amount"],
        "outcome_id": done.outcome_id,
        "request": {k: v for k, v in req.items() if k != "context"},
        "reported_by": call.who.principal,
        "reported_key_id": call.who.key_id,
        "created_at": rfc3339(call.now),
    }
    rows.insert_adjustment(
        AdjustmentRow(
            adjustment_id=adjustment_id,
            principal=row.principal,
            plan_id=row.plan_id,
            outcome_id=done.outcome_id,
            state="reported",
            record=record,
            created_at=record["created_at"],
        )
    )
    st.audit(tx, row.principal, row.plan_id, "adjustment", _detail(record, "reported", 0))
    return _answer(st, tx, row, record, "reported", Decimal(0))


def _review(st: AdcpState, call: Call, tx: Any, row: Any) -> Answer:
    req = call.request
    rows = st.rows(tx)
    adj = next(
        (
            a
            for a in rows.adjustments(row.principal, row.plan_id)
            if a.adjustment_id == req["adjustment_id"]
        ),
        None,
    )
    if adj is None:
        raise AdcpError(
            "REFERENCE_NOT_FOUND", f"no adjustment {req['adjustment_id']!r}", field="adjustment_id"
        )
    if adj.state != "reported":
        raise AdcpError(
            "INVALID_STATE",
            f"adjustment {adj.adjustment_id} is already {adj.state}",
            field="adjustment_id",
        )
    outcomes = rows.outcomes(row.principal, row.plan_id)
    done = next(o for o in outcomes if o.outcome_id == adj.outcome_id)
    plan = Plan.from_record(row.record)
    record = dict(adj.record, reviewed_by=call.who.principal, reviewed_at=rfc3339(call.now))
    restored = Decimal(0)
    if req["decision"] == "accept":
        if blocking_dispute(outcomes, str(done.record.get("action_check_id"))):
            raise AdcpError(
                "CONFLICT",
                "a delivery period of this action is open and disputed; accept the "
                "adjustment once it is reconciled or the period is closed",
                retry_after=60,
            )
        state = "verified"
        if restores(plan, str(adj.record["adjustment_type"])):
            if adj.record.get("reported_key_id") == call.who.key_id:
                if not st.compliance_mode:
                    raise AdcpError(
                        "PERMISSION_DENIED",
                        "the API key that reported this adjustment may not accept it: "
                        "accepting gives budget back, so another key of the plan's "
                        "owner (the buyer's, not the seller's) must review it",
                        field="adjustment_id",
                    )
                record["self_reviewed"] = True  # compliance-testing mode only
            restored = to_decimal(adj.record["amount"]["amount"])
    else:
        state = "disputed"
        record["dispute_reason"] = req.get("reason")
    record["headroom_restored"] = str(restored)
    if not rows.review_adjustment(adj.adjustment_id, state, record):  # pragma: no cover
        raise AdcpError("INVALID_STATE", f"adjustment {adj.adjustment_id} changed meanwhile")
    if restored:
        apply_cap(st, tx, row, plan, plan_money(st, tx, row).restored)
    st.audit(tx, row.principal, row.plan_id, "adjustment", _detail(record, state, restored))
    return _answer(st, tx, row, record, state, restored)


def _detail(record: dict[str, Any], state: str, restored: Decimal | int) -> dict[str, Any]:
    return {
        "adjustment_id": record["adjustment_id"],
        "adjustment_type": record["adjustment_type"],
        "amount": record["amount"],
        "outcome_id": record["outcome_id"],
        "state": state,
        "headroom_restored": str(restored),
        "reviewed_by": record.get("reviewed_by"),
    }


def _answer(
    st: AdcpState, tx: Any, row: Any, record: dict[str, Any], state: str, restored: Decimal
) -> Answer:
    return Answer(
        {
            "adjustment_id": record["adjustment_id"],
            "adjustment_state": state,
            "adjustment_type": record["adjustment_type"],
            "amount": record["amount"],
            "headroom_restored": wire_number(restored),
            "plan_summary": plan_money(st, tx, row).summary(),
        }
    )
