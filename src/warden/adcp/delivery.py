"""Delivery reconciliation: a delivery observation (``report_plan_outcome`` with
``outcome: delivery``) against the seller's canonical statements that delivery-phase
checks carried (specs/adcp-spend-kla.md §1.6; the delivery-monitor storyboard).

- ``seller_statement_copy``: the statement it names must exist, with the same digest and
  cumulative spend — else ``disputed`` (``unmatched`` when no such statement);
- ``buyer_measurement``: the statement of the same reporting period; a different
  cumulative spend is ``measurement_variance`` (``unmatched`` when none);
- ``period_closed: true`` closes the period; a dispute still standing at closing is
  ``closed_unresolved``.

While the latest observation of some period of an action is ``disputed`` and the period
is open, adjustments on that action cannot be accepted (:func:`blocking_dispute`).
"""

from __future__ import annotations

from typing import Any

from warden.adcp.plans import to_decimal
from warden.store.adcp_sql import CheckRow, OutcomeRow

STATEMENT_KEYS = (
    "statement_id",
    "statement_digest",
    "sequence",
    "issued_at",
    "reporting_period",
    "cumulative_spend",
    "currency",
)


def statement_of(req: dict[str, Any]) -> dict[str, Any] | None:
    """The canonical statement a delivery-phase check carries (its ``delivery_metrics``)."""
    metrics = req.get("delivery_metrics")
    if not isinstance(metrics, dict) or "statement_id" not in metrics:
        return None
    return {k: metrics[k] for k in STATEMENT_KEYS if k in metrics}


def reconcile(delivery: dict[str, Any], checks: list[CheckRow], action: str) -> dict[str, Any]:
    """``{status, period_state, period, statement_id}`` of one observation of the action
    whose intent check is ``action``."""
    statements = [
        c.record["delivery_statement"]
        for c in checks
        if c.record.get("intent_check_id") == action and c.record.get("delivery_statement")
    ]
    period = delivery.get("reporting_period") or {}
    spend = to_decimal(delivery["cumulative_spend"])
    match: dict[str, Any] | None
    if delivery.get("source") == "seller_statement_copy":
        sid = delivery.get("seller_statement_id")
        match = next((s for s in statements if s.get("statement_id") == sid), None)
        same = match is not None and (
            match.get("statement_digest") == delivery.get("seller_statement_digest")
            and _spend(match) == spend
        )
        status = "unmatched" if match is None else "consistent" if same else "disputed"
    else:
        match = next((s for s in statements if s.get("reporting_period") == period), None)
        status = (
            "unmatched"
            if match is None
            else "consistent"
            if _spend(match) == spend
            else "measurement_variance"
        )
    closed = delivery.get("period_closed") is True
    if closed and status == "disputed":
        status = "closed_unresolved"
    return {
        "status": status,
        "period_state": "closed" if closed else "open",
        "period": period,
        "statement_id": None if match is None else match.get("statement_id"),
    }


def _spend(statement: dict[str, Any]) -> Any:
    value = statement.get("cumulative_spend")
    return None if value is None else to_decimal(value)


def finding(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The warning an observation that does not reconcile raises (None when it does)."""
    status = rec["status"]
    if status == "consistent":
        return None
    text = {
        "disputed": "The observation contradicts the seller's canonical delivery statement.",
        "closed_unresolved": "The period closed with the delivery statement still disputed.",
        "measurement_variance": "The buyer's measurement differs from the seller's statement.",
        "unmatched": "No seller delivery statement matches this observation.",
    }[status]
    return {
        "category_id": "delivery_reconciliation",
        "severity": "warning",
        "explanation": text,
        "details": {"reconciliation_status": status, "statement_id": rec.get("statement_id")},
    }


def blocking_dispute(outcomes: list[OutcomeRow], action: str) -> bool:
    """True while the latest observation of some period of ``action`` is an open dispute."""
    latest: dict[str, dict[str, Any]] = {}
    for o in outcomes:  # in creation order: later observations replace earlier ones
        rec = o.record.get("delivery_reconciliation")
        if o.outcome == "delivery" and o.record.get("action_check_id") == action and rec:
            period = rec.get("period") or {}
            latest[f"{period.get('start')}/{period.get('end')}"] = rec
    return any(r["status"] == "disputed" and r["period_state"] == "open" for r in latest.values())
