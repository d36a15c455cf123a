"""The read tasks: ``get_adcp_capabilities``, ``get_plan_audit_logs`` and
``get_task_status`` (specs/adcp-spend-kla.md §1.2, §1.5, §1.6).

Reads show the caller only its own plans, checks and tasks: another caller's plan is
left out of the audit logs exactly as an unknown one is, and another caller's task is
``REFERENCE_NOT_FOUND`` exactly as an unknown one.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from warden import __version__
from warden.adcp.errors import AdcpError
from warden.adcp.plan_money import plan_money, restores
from warden.adcp.plans import Plan, to_decimal
from warden.adcp.state import AdcpState, Answer, Call, rfc3339, wire_number
from warden.store.adcp_sql import AdjustmentRow, CheckRow, OutcomeRow, PlanRow

MAJOR_VERSIONS = [3]
SUPPORTED_VERSIONS = ["3.2"]
SPECIALISMS = ["governance-spend-authority", "governance-delivery-monitor"]


def capabilities(st: AdcpState, call: Call, tx: Any) -> Answer:
    """The capability document: governance protocol, idempotency window, versions."""
    body: dict[str, Any] = {
        "adcp": {
            "major_versions": MAJOR_VERSIONS,
            "supported_versions": SUPPORTED_VERSIONS,
            "idempotency": {
                "supported": True,
                "replay_ttl_seconds": st.replay_ttl_seconds,
            },
        },
        "supported_protocols": ["governance"],
        "specialisms": SPECIALISMS,
        "experimental_features": ["governance.campaign"],
        "governance": {},
    }
    if st.request_signing is not None:
        body["request_signing"] = st.request_signing
    build = __version__.split("+")[0]
    if build.count(".") == 2:
        body["adcp"]["build_version"] = build
    return Answer(body)


def get_plan_audit_logs(st: AdcpState, call: Call, tx: Any) -> Answer:
    """Per requested plan of the caller: budget, summary, governed actions and (with
    ``include_entries``) every check and outcome in time order."""
    who = call.who.principal
    rows = st.rows(tx)
    entries_wanted = bool(call.request.get("include_entries"))
    out = []
    for plan_id in call.request.get("plan_ids") or ():
        row = rows.plan(who, str(plan_id))
        if row is None:
            continue
        checks = rows.checks(who, row.plan_id)
        outcomes = rows.outcomes(who, row.plan_id)
        out.append(_plan_log(st, tx, row, checks, outcomes, entries_wanted))
    return Answer({"plans": out})


def _plan_log(
    st: AdcpState,
    tx: Any,
    row: PlanRow,
    checks: list[CheckRow],
    outcomes: list[OutcomeRow],
    entries_wanted: bool,
) -> dict[str, Any]:
    plan = Plan.from_record(row.record)
    money = plan_money(st, tx, row)
    adjustments = st.rows(tx).adjustments(row.principal, row.plan_id)
    statuses = {"approved": 0, "denied": 0, "conditions": 0, "human_reviewed": 0}
    escalations = []
    for c in checks:
        if c.verdict in statuses:
            statuses[c.verdict] += 1
        if c.task_id is not None:
            if c.verdict is not None:
                statuses["human_reviewed"] += 1
            esc: dict[str, Any] = {
                "check_id": c.check_id,
                "reason": str(c.record.get("review_reason") or "human review"),
            }
            if c.verdict is not None:
                esc["resolution"] = (
                    "approved_by_human" if c.verdict == "approved" else "rejected_by_human"
                )
            escalations.append(esc)
    actions = _actions(plan, checks, outcomes, adjustments)
    log: dict[str, Any] = {
        "plan_id": row.plan_id,
        "plan_version": row.version,
        "status": "active",
        "budget": {
            "authorized": wire_number(plan.total),
            "accounting_mode": money.mode,
            "committed": wire_number(money.ledger_committed),
            "gross_committed": wire_number(money.gross),
            "adjustments_reported": wire_number(money.reported),
            "adjustments_verified": wire_number(money.verified),
            "net_cost": wire_number(max(money.net_cost, Decimal(0))),
            "headroom_restored": wire_number(money.restored),
            "net_committed": wire_number(money.ledger_committed),
            "ledger_committed": wire_number(money.ledger_committed),
            "remaining": wire_number(money.remaining),
            "utilization_pct": float(round(money.ledger_committed / plan.total * 100, 4))
            if plan.total
            else 0.0,
        },
        "governed_actions": actions,
        "summary": {
            "checks_performed": len(checks),
            "outcomes_reported": len(outcomes),
            "adjustments_reported": len(adjustments),
            "adjustments_verified": sum(1 for a in adjustments if a.state == "verified"),
            "statuses": statuses,
            "escalations": escalations,
        },
    }
    if entries_wanted:
        entries = (
            [_check_entry(c, row) for c in checks]
            + [_outcome_entry(o) for o in outcomes]
            + [_adjustment_entry(a) for a in adjustments]
        )
        entries.sort(key=lambda e: (e["timestamp"], e["id"]))
        log["entries"] = entries
    return log


def _actions(
    plan: Plan,
    checks: list[CheckRow],
    outcomes: list[OutcomeRow],
    adjustments: list[AdjustmentRow],
) -> list[dict[str, Any]]:
    """``governed_actions``: one per authorizing intent check. ``committed`` is what the
    action's terminal outcome settled (``completed``: its committed budget; ``failed``:
    0, the hold was released), else the amount held; the adjustments reported on that
    outcome give the action's ``adjustments_*``, ``headroom_restored``, ``net_cost`` and
    ``net_committed`` with the plan-level arithmetic (:mod:`.plan_money`)."""
    terminal = {o.settles: o for o in outcomes if o.settles is not None}
    action_of_outcome = {o.outcome_id: o.settles for o in outcomes if o.settles is not None}
    out = []
    for c in checks:
        if c.check_type != "intent" or c.jti is None:  # only authorizing checks
            continue
        token = (c.record.get("response") or {}).get("governance_context")
        if not token:
            continue
        settled = terminal.get(c.check_id)
        if settled is None:
            committed = _decimal(c.record.get("amount"))
        elif settled.outcome == "completed":
            committed = _decimal(settled.record.get("committed_budget"))
        else:
            committed = Decimal(0)
        mine = [a for a in adjustments if action_of_outcome.get(a.outcome_id) == c.check_id]
        reported = sum((_adj(a) for a in mine if a.state != "disputed"), Decimal(0))
        verified = [a for a in mine if a.state == "verified"]
        verified_sum = sum((_adj(a) for a in verified), Decimal(0))
        restored = sum(
            (_adj(a) for a in verified if restores(plan, a.record["adjustment_type"])),
            Decimal(0),
        )
        action: dict[str, Any] = {
            "governance_context": token,
            "purchase_type": str(c.record["request"].get("purchase_type") or "media_buy"),
            "status": "completed" if settled is not None else "active",
            "committed": wire_number(committed),
            "adjustments_reported": wire_number(reported),
            "adjustments_verified": wire_number(verified_sum),
            "net_cost": wire_number(max(committed - verified_sum, Decimal(0))),
            "headroom_restored": wire_number(restored),
            "net_committed": wire_number(committed - restored),
            "check_count": 1
            + sum(1 for x in checks if x.record.get("intent_check_id") == c.check_id),
        }
        if settled is not None:
            ref = (settled.record.get("request") or {}).get("seller_response") or {}
            if isinstance(ref.get("seller_reference"), str):
                action["seller_reference"] = ref["seller_reference"]
        out.append(action)
    return out


def _adj(a: AdjustmentRow) -> Decimal:
    return to_decimal(a.record["amount"]["amount"])


def _decimal(value: Any) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


def _check_entry(c: CheckRow, row: PlanRow) -> dict[str, Any]:
    response = c.record.get("response") or {}
    entry: dict[str, Any] = {
        "id": c.check_id,
        "type": "check",
        "timestamp": c.created_at,
        "plan_id": c.plan_id,
        "check_type": c.check_type,
        "mode": "enforce",
        "plan_hash": row.plan_hash,
    }
    if isinstance(c.record.get("caller"), str):
        entry["caller"] = c.record["caller"]
    if c.record.get("tool"):
        entry["tool"] = c.record["tool"]
    if c.verdict is not None:
        entry["verdict"] = c.verdict
    for key in ("explanation", "findings", "categories_evaluated", "policies_evaluated"):
        if key in response:
            entry[key] = response[key]
    if response.get("governance_context"):
        entry["governance_context"] = response["governance_context"]
    purchase = c.record["request"].get("purchase_type")
    if purchase:
        entry["purchase_type"] = purchase
    reviewers = c.record.get("reviewed_by")
    if reviewers:
        entry["review_reason"] = str(c.record.get("review_reason") or "")
    return entry


def _outcome_entry(o: OutcomeRow) -> dict[str, Any]:
    req = o.record.get("request") or {}
    entry: dict[str, Any] = {
        "id": o.outcome_id,
        "type": "outcome",
        "timestamp": o.created_at,
        "plan_id": o.plan_id,
        "outcome": o.outcome,
        "outcome_id": o.outcome_id,
    }
    seller = req.get("seller_response") or {}
    if "committed_budget" in seller:
        entry["committed_budget"] = seller["committed_budget"]
    if isinstance(seller.get("seller_reference"), str):
        entry["seller_reference"] = seller["seller_reference"]
    if isinstance(req.get("governance_context"), str):
        entry["governance_context"] = req["governance_context"]
    return entry


def _adjustment_entry(a: AdjustmentRow) -> dict[str, Any]:
    req = a.record.get("request") or {}
    entry: dict[str, Any] = {
        "id": a.adjustment_id,
        "type": "adjustment",
        "timestamp": a.created_at,
        "plan_id": a.plan_id,
        "outcome_id": a.outcome_id,
        "adjustment_type": a.record["adjustment_type"],
        "amount": a.record["amount"],
        "adjustment_state": a.state,
        "headroom_restored": wire_number(_decimal(a.record.get("headroom_restored"))),
    }
    for key in ("seller_adjustment_id", "reason", "effective_at", "evidence", "seller_reference"):
        if key in req:
            entry[key] = req[key]
    return entry


def get_task_status(st: AdcpState, call: Call, tx: Any) -> Answer:
    """An async check's state: ``submitted`` while a human reviews it, then
    ``completed`` with the check_governance answer as ``result``."""
    task_id = str(call.request["task_id"])
    who = call.who.principal
    row = st.rows(tx).check_by("task_id", task_id)
    if row is None or who not in (row.principal, row.record.get("requested_by")):
        raise AdcpError("REFERENCE_NOT_FOUND", f"no task {task_id!r}", field="task_id")
    task = tx.tasks.get(task_id)
    body: dict[str, Any] = {
        "task_id": task_id,
        "task_type": "check_governance",
        "protocol": "governance",
        "created_at": row.created_at,
        "updated_at": _rfc(task.updated_at) if task is not None else row.created_at,
    }
    if row.verdict is None:
        return Answer(body, status="submitted")
    body["completed_at"] = body["updated_at"]
    body["result"] = row.record.get("response") or {}
    return Answer(body, status="completed")


def _rfc(at: Any) -> str:
    return rfc3339(at)
