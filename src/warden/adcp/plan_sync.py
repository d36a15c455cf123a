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

import re
from decimal import Decimal
from typing import Any

from warden.adcp.errors import AdcpError
from warden.adcp.plan_hash import plan_hash
from warden.adcp.plan_money import apply_cap, plan_money
from warden.adcp.plans import Plan, parse_time
from warden.adcp.state import AdcpState, Answer, Call, budget_id_for, rfc3339
from warden.errors import InputRejected
from warden.spend.money import parse_amount
from warden.store.adcp_sql import PlanRow

#: At most this many plans in one sync_plans request (each counts as one write against
#: the rate limiter).
MAX_PLANS = 100
MAX_PLAN_ID = 255
PLAN_ID = re.compile(r"[A-Za-z0-9_.:-]+")
CURRENCY = re.compile(r"[A-Z]{3}")


def check_plans(request: dict[str, Any]) -> None:
    """What the schema leaves open, checked before anything is counted or stored:
    at most :data:`MAX_PLANS` plans, each ``plan_id`` 1..255 characters of
    ``[A-Za-z0-9_.:-]`` and unique in the request, ``budget.currency`` an ISO 4217 code
    (three upper-case letters), ``flight.end`` after ``flight.start``. Raises
    ``INVALID_REQUEST`` naming the field."""
    plans = request["plans"]
    if len(plans) > MAX_PLANS:
        raise AdcpError(
            "INVALID_REQUEST",
            f"{len(plans)} plans in one request; send at most {MAX_PLANS} per sync_plans",
            field="plans",
        )
    seen: set[str] = set()
    for i, item in enumerate(plans):
        plan_id = item["plan_id"]
        if not 1 <= len(plan_id) <= MAX_PLAN_ID or not PLAN_ID.fullmatch(plan_id):
            raise AdcpError(
                "INVALID_REQUEST",
                f"plans[{i}].plan_id must be 1 to {MAX_PLAN_ID} characters of letters, "
                "digits and _ . : -",
                field=f"plans[{i}].plan_id",
            )
        if plan_id in seen:
            raise AdcpError(
                "INVALID_REQUEST",
                f"plan {plan_id} appears more than once in this request; send each plan once",
                field=f"plans[{i}].plan_id",
            )
        seen.add(plan_id)
        currency = item["budget"]["currency"]
        if not CURRENCY.fullmatch(currency):
            raise AdcpError(
                "INVALID_REQUEST",
                f"plans[{i}].budget.currency {currency[:16]!r} is not an ISO 4217 code "
                "(three upper-case letters, e.g. USD)",
                field=f"plans[{i}].budget.currency",
            )
        try:
            start, end = (parse_time(item["flight"][k]) for k in ("start", "end"))
            ordered = end > start
        except (ValueError, TypeError) as exc:
            raise AdcpError(
                "INVALID_REQUEST",
                f"plans[{i}].flight needs RFC 3339 date-times with an offset",
                field=f"plans[{i}].flight",
            ) from exc
        if not ordered:
            raise AdcpError(
                "INVALID_REQUEST",
                f"plans[{i}].flight.end must be after flight.start",
                field=f"plans[{i}].flight.end",
            )


def sync_plans(st: AdcpState, call: Call, tx: Any) -> Answer:
    """Upsert every plan of the request; all or nothing (one transaction). A re-sync
    may not lower ``budget.total`` below what the plan already commits."""
    check_plans(call.request)
    who = call.who.principal
    rows = st.rows(tx)
    out: list[dict[str, Any]] = []
    for i, item in enumerate(call.request["plans"]):
        plan = Plan.from_record(item)
        old = rows.plan(who, plan.plan_id)
        if old is not None and old.record["budget"] != item["budget"]:
            committed = plan_money(st, tx, old).ledger_committed
            if plan.total < committed:
                raise AdcpError(
                    "INVALID_REQUEST",
                    f"plan {plan.plan_id} already commits {committed} {plan.currency} "
                    f"(held and settled); its budget.total cannot go below that",
                    field=f"plans[{i}].budget.total",
                )
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
