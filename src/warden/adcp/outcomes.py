"""``report_plan_outcome``: what happened to a governed action, settled on the plan's
budget in the spend ledger (specs/adcp-spend-kla.md §1.6 "Audit").

- ``completed``: the hold the approval took is settled at ``seller_response
  .committed_budget`` (at most the authorized amount; more is ``BUDGET_EXCEEDED`` and
  changes nothing), the rest released.
- ``failed``: the hold is released.
- ``delivery``: a delivery observation, reconciled against the seller's canonical
  statements (:mod:`.delivery`); no ledger change.

``completed`` and ``failed`` are terminal: an action (identified by its approved intent
check) has at most one, enforced by the unique ``settles`` column — a second is
``INVALID_STATE``. The ``check_id`` must be the caller's authorizing check (one that
issued a token: approved, or a legacy conditional approval) on this plan and
``governance_context`` a token issued for that same action.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

from warden.adcp.delivery import finding, reconcile
from warden.adcp.errors import AdcpError
from warden.adcp.plan_money import plan_money
from warden.adcp.plans import to_decimal
from warden.adcp.state import AdcpState, Answer, Call, new_id, rfc3339, wire_number
from warden.spend.errors import ReservationNotHeld, SettlementExceedsReservation
from warden.store.adcp_sql import CheckRow, OutcomeRow

TERMINAL = ("completed", "failed")


def report_plan_outcome(st: AdcpState, call: Call, tx: Any) -> Answer:
    req, who = call.request, call.who.principal
    plan_row = st.plan(tx, who, str(req["plan_id"]))
    rows = st.rows(tx)
    outcome = str(req["outcome"])
    check: CheckRow | None = None
    if "check_id" in req:
        check = rows.check(str(req["check_id"]))
        if check is None or (check.principal, check.plan_id) != (who, plan_row.plan_id):
            raise AdcpError(
                "REFERENCE_NOT_FOUND", f"no check {req['check_id']!r}", field="check_id"
            )
        if check.jti is None:  # only a verdict that authorized (issued a token) has one
            raise AdcpError(
                "INVALID_STATE",
                f"check {check.check_id} authorized nothing (verdict "
                f"{check.verdict or 'pending review'}); only an authorized action has an outcome",
                field="check_id",
            )
    intent = check
    if check is not None and check.check_type == "execution":
        intent = rows.check(str(check.record.get("intent_check_id"))) or check
    if check is not None and "governance_context" in req:
        claims = st.token_claims(str(req["governance_context"]))
        if claims.get("sub") != check.record.get("sub"):
            raise AdcpError(
                "INVALID_REQUEST",
                "governance_context was not issued for this check's action",
                field="governance_context",
            )
    outcome_id = new_id("out")
    record: dict[str, Any] = {
        "outcome_id": outcome_id,
        "outcome": outcome,
        "check_id": None if check is None else check.check_id,
        "action_check_id": None if intent is None else intent.check_id,
        "request": {k: v for k, v in req.items() if k != "context"},
        "reported_by": who,
        "key_id": call.who.key_id,
        "created_at": rfc3339(call.now),
    }
    body: dict[str, Any] = {"outcome_id": outcome_id, "outcome_state": "accepted"}
    reservation = None if intent is None else intent.reservation_id
    committed: Decimal | None = None
    if outcome == "completed" and intent is not None:
        # Governance's own authorized amount unless the seller reports what it committed.
        seller = req.get("seller_response") or {}
        authorized = intent.record.get("amount")
        if "committed_budget" in seller:
            committed = to_decimal(seller["committed_budget"])
        elif authorized is not None:
            committed = Decimal(str(authorized))
        if committed is not None:
            record["committed_budget"] = str(committed)
            body["committed_budget"] = wire_number(committed)
    if outcome == "delivery" and intent is not None and isinstance(req.get("delivery"), dict):
        rec = reconcile(req["delivery"], rows.checks(who, plan_row.plan_id), intent.check_id)
        record["delivery_reconciliation"] = rec
        body["delivery_reconciliation_status"] = rec["status"]
        body["delivery_period_state"] = rec["period_state"]
        warn = finding(rec)
        if warn is not None:
            body["outcome_state"] = "findings"
            body["findings"] = [warn]
    settles = intent.check_id if outcome in TERMINAL and intent is not None else None
    if not rows.insert_outcome(
        OutcomeRow(
            outcome_id=outcome_id,
            principal=who,
            plan_id=plan_row.plan_id,
            check_id=record["check_id"],
            outcome=outcome,
            settles=settles,
            record=record,
            created_at=record["created_at"],
        )
    ):
        raise AdcpError(
            "INVALID_STATE",
            f"the action of check {record['check_id']} already has a terminal outcome",
            field="check_id",
        )
    eng = st.engine.within(tx)
    receipt_id = None
    if outcome == "completed" and reservation is not None and committed is not None:
        try:
            receipt_id = eng.settle(reservation, committed).id
        except SettlementExceedsReservation as exc:
            raise AdcpError(
                "BUDGET_EXCEEDED",
                "committed_budget exceeds the amount this action was authorized for",
                field="seller_response.committed_budget",
            ) from exc
        except ReservationNotHeld as exc:
            raise AdcpError(
                "INVALID_STATE", "the action's budget hold is no longer held", field="check_id"
            ) from exc
    elif outcome == "failed" and reservation is not None:
        with contextlib.suppress(ReservationNotHeld):  # expired: nothing is held any more
            eng.release(reservation, reason=f"adcp outcome failed ({outcome_id})")
    money = plan_money(st, tx, plan_row)
    body["plan_summary"] = {
        "total_committed": wire_number(money.ledger_committed),
        "budget_remaining": wire_number(money.remaining),
    }
    st.audit(
        tx,
        who,
        plan_row.plan_id,
        "outcome",
        {
            "outcome_id": outcome_id,
            "outcome": outcome,
            "check_id": record["check_id"],
            "settles": settles,
            "reservation_id": reservation,
            "receipt_id": receipt_id,
            "committed_budget": body.get("committed_budget"),
            "reconciliation": record.get("delivery_reconciliation"),
            "reported_by": who,
        },
    )
    return Answer(body)
