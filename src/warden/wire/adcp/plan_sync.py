"""``sync_plans``: a caller's campaign plans, each with a budget in the spend ledger
(specs/adcp-spend-kla.md §1.6 "Plan").

A plan belongs to the authenticated caller (the API key's principal): another caller's
plan with the same id is a different plan. Each plan's ``budget.total`` is the cap of
one budget in the spend ledger (``adcp:<hash>``, period ``none``) that approved checks
hold against and outcomes settle on, like the spend wire's quotes. Re-syncing a changed
plan bumps its ``version`` and the budget's cap; an identical re-sync changes nothing.
A plan's currency never changes (its ledger budget cannot).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from warden.adcp.plan_hash import plan_hash
from warden.adcp.plans import Plan
from warden.errors import InputRejected
from warden.spend.money import parse_amount
from warden.store.adcp_sql import PlanRow
from warden.wire.adcp.envelope import AdcpError
from warden.wire.adcp.plan_money import apply_cap, plan_money
from warden.wire.adcp.state import AdcpState, Answer, Call, budget_id_for, rfc3339


def sync_plans(st: AdcpState, call: Call, tx: Any) -> Answer:
    """Upsert every plan of the request; all or nothing (one transaction)."""
    who = call.who.principal
    rows = st.rows(tx)
    out: list[dict[str, Any]] = []
    for i, item in enumerate(call.request["plans"]):
        plan = Plan.from_record(item)
        old = rows.plan(who, plan.plan_id)
        if old is not None and old.record["budget"]["currency"] != plan.currency:
            raise AdcpError(
                "INVALID_REQUEST",
                f"plan {plan.plan_id} is in {old.record['budget']['currency']}; a plan's "
                "currency cannot change (sync a new plan instead)",
                field=f"plans[{i}].budget.currency",
            )
        budget_id = budget_id_for(who, plan.plan_id)
        if old is None or old.record != item:
            version = 1 if old is None else old.version + 1
            digest = plan_hash(item)
            row = PlanRow(
                principal=who,
                plan_id=plan.plan_id,
                version=version,
                status="active",
                budget_id=budget_id,
                plan_hash=digest,
                record=item,
                updated_at=rfc3339(call.now),
            )
            # The cap keeps the headroom verified adjustments restored (plan_money).
            restored = plan_money(st, tx, old).restored if old is not None else Decimal(0)
            try:
                parse_amount(plan.total, field=f"plans[{i}].budget.total")
                apply_cap(st, tx, row, plan, restored)
            except InputRejected as exc:
                raise AdcpError(
                    "INVALID_REQUEST",
                    f"plan {plan.plan_id}: {exc.message}",
                    field=f"plans[{i}].budget",
                ) from exc
            rows.put_plan(row)
            st.audit(
                tx,
                who,
                plan.plan_id,
                "plan_synced",
                {
                    "plan_id": plan.plan_id,
                    "version": version,
                    "plan_hash": digest,
                    "budget_id": budget_id,
                    "total": str(plan.total),
                    "currency": plan.currency,
                    "human_review_required": plan.human_review_required,
                    "key_id": call.who.key_id,
                },
            )
        else:
            version = old.version
        entry: dict[str, Any] = {"plan_id": plan.plan_id, "status": "active", "version": version}
        policies = [
            {
                "policy_id": str(p["policy_id"]),
                "source": "explicit",
                "enforcement": str(p["enforcement"]),
            }
            for p in item.get("custom_policies") or ()
            if "enforcement" in p
        ]
        if policies:
            entry["resolved_policies"] = policies
        out.append(entry)
    return Answer({"plans": out})
