"""A plan's money, one arithmetic for every answer that reports it (sync_plans,
report_plan_outcome, report_plan_adjustment, get_plan_audit_logs).

The spend ledger holds the truth of what is committed: ``held`` (approved, not yet
settled) and ``settled`` (completed outcomes, gross). Verified adjustments
(report_plan_adjustment) change the accounting, not the settled rows:

- ``gross_committed`` = held + settled;
- ``headroom_restored`` = verified adjustments that give budget back — decommitments,
  and under ``verified_net_cost`` also refunds and credits (never makegoods);
- ``ledger_committed`` = gross − headroom restored; ``net_cost`` = gross − every
  verified adjustment;
- ``budget_remaining`` = total − ledger committed.

Restored headroom is made spendable in the ledger by raising the plan budget's cap by
that amount (:func:`apply_cap`), so later holds can use it; the cap is always
``total + headroom_restored``, also when a plan is re-synced.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from warden.adcp.plans import Plan, to_decimal
from warden.adcp.state import AdcpState, wire_number
from warden.spend.budgets import Budget, BudgetKind, Period
from warden.store.adcp_sql import AdjustmentRow, PlanRow

RESTORING = {
    "gross_commitment": frozenset({"decommitment"}),
    "verified_net_cost": frozenset({"decommitment", "refund", "credit"}),
}


def accounting_mode(plan: Plan) -> str:
    return str(plan.record["budget"].get("accounting_mode") or "gross_commitment")


def restores(plan: Plan, adjustment_type: str) -> bool:
    """Whether a verified adjustment of this type gives budget back to the plan."""
    return adjustment_type in RESTORING[accounting_mode(plan)]


def _amount(a: AdjustmentRow) -> Decimal:
    return to_decimal(a.record["amount"]["amount"])


@dataclass(frozen=True)
class PlanMoney:
    total: Decimal
    mode: str
    held: Decimal
    settled: Decimal
    reported: Decimal
    verified: Decimal
    restored: Decimal

    @property
    def gross(self) -> Decimal:
        return self.held + self.settled

    @property
    def ledger_committed(self) -> Decimal:
        return self.gross - self.restored

    @property
    def net_cost(self) -> Decimal:
        return self.gross - self.verified

    @property
    def remaining(self) -> Decimal:
        return self.total - self.ledger_committed

    def summary(self) -> dict[str, Any]:
        """``plan_summary`` of report_plan_adjustment (every member required there)."""
        return {
            "accounting_mode": self.mode,
            "gross_committed": wire_number(self.gross),
            "adjustments_reported": wire_number(self.reported),
            "adjustments_verified": wire_number(self.verified),
            "net_cost": wire_number(max(self.net_cost, Decimal(0))),
            "headroom_restored": wire_number(self.restored),
            "ledger_committed": wire_number(self.ledger_committed),
            "net_committed": wire_number(self.ledger_committed),
            "budget_remaining": wire_number(self.remaining),
        }


def plan_money(st: AdcpState, tx: Any, row: PlanRow) -> PlanMoney:
    plan = Plan.from_record(row.record)
    held, settled, _ = st.budget_state(tx, row.budget_id)
    adjustments = st.rows(tx).adjustments(row.principal, row.plan_id)
    verified = [a for a in adjustments if a.state == "verified"]
    return PlanMoney(
        total=plan.total,
        mode=accounting_mode(plan),
        held=held,
        settled=settled,
        reported=sum((_amount(a) for a in adjustments if a.state != "disputed"), Decimal(0)),
        verified=sum((_amount(a) for a in verified), Decimal(0)),
        restored=sum(
            (_amount(a) for a in verified if restores(plan, a.record["adjustment_type"])),
            Decimal(0),
        ),
    )


def apply_cap(st: AdcpState, tx: Any, row: PlanRow, plan: Plan, restored: Decimal) -> None:
    """Set the plan budget's cap to ``total + restored`` in the spend ledger (audited
    there as a budget change), bound to the plan's owner alone."""
    st.engine.within(tx).define_budget(
        Budget(
            id=row.budget_id,
            kind=BudgetKind.ORG,
            currency=plan.currency,
            cap=plan.total + restored,
            period=Period.NONE,
            parent_id=None,
            name=f"AdCP plan {plan.plan_id} ({row.principal})"[:200],
            # Only the plan's owner reaches its budget, on the spend wire too.
            principals=(row.principal,),
        )
    )
