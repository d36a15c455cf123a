"""The media-buy governance storyboards of compliance 3.2.0-beta.0, run against a real
server (uvicorn on loopback): ``governance_{approved,conditions,denied,denied_recovery}``.

Warden plays the ``governance`` agent; the ``sales`` agent is the test seller of
:mod:`storyboard`, which checks Warden's tokens with the seller-side verifier. Beyond the
storyboards' own validations, each test asserts the side effects: budget held and
settled in the spend ledger, and one audit entry per state change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
from adcp_helpers import Live, adcp_entries, live
from storyboard import Seller, run_storyboard

from warden.adcp.state import budget_id_for
from warden.runtime import Runtime
from warden.spend.budgets import Period, period_key

SCENARIOS = "protocols/media-buy/scenarios/"


@pytest.fixture
def srv(make_runtime: Callable[..., Runtime]) -> Iterator[Live]:
    with live(make_runtime()) as s:
        yield s


def seller_for(srv: Live) -> Seller:
    jwks = srv.http.get("/.well-known/jwks.json").json()
    assert jwks["keys"][0]["use"] == "sig"
    # The credential the buyer hands the seller in sync_governance: a key of the buyer's
    # own principal, so the seller's checks see the buyer's plans.
    seller_key = srv.key("buyer-agent", "agent")
    assert srv.rt.adcp is not None
    return Seller(srv.rest(seller_key), jwks, srv.rt.adcp.state.signer.issuer)


def usage(srv: Live, plan_id: str) -> tuple[Decimal, Decimal]:
    bid = budget_id_for("buyer-agent", plan_id)
    with srv.rt.store.transaction() as tx:
        held, settled = tx.usage(bid, period_key(Period.NONE, srv.rt.spend.now()))
    return held, settled


def test_governance_approved(srv: Live) -> None:
    seller = seller_for(srv)
    run = run_storyboard(SCENARIOS + "governance_approved.yaml", srv.rest(), seller)
    # The tampered request was refused by the seller's verifier; the exact one committed.
    assert run.replies["create_media_buy_tampered"]["adcp_error"]["code"] == "PERMISSION_DENIED"
    assert run.replies["create_media_buy"]["media_buy_id"] in seller.buys
    # 25 000 was held on approval and settled by the completed outcome.
    assert usage(srv, "comply-gov-approved-plan") == (0, 25000)
    steps = [e["step_type"] for e in adcp_entries(srv.rt)]
    assert steps.count("warden/adcp.plan_synced") == 1
    assert steps.count("warden/adcp.check") == 2  # the intent, the seller's execution check
    assert steps.count("warden/adcp.outcome") == 1


def test_governance_conditions(srv: Live) -> None:
    seller = seller_for(srv)
    run = run_storyboard(SCENARIOS + "governance_conditions.yaml", srv.rest(), seller)
    conditions = run.replies["check_governance_conditions"]
    assert conditions["conditions"][0]["required_value"] == ["ctv_weekly_reporting"]
    # Only the adjusted (approved) check held budget; the outcome settled it.
    assert usage(srv, "comply-gov-conditions-plan") == (0, 25000)
    assert [c["verdict"] for c in seller.execution_checks] == ["approved"]
    logs = run.replies["get_plan_audit_logs_execution"]["plans"][0]
    assert [e["verdict"] for e in logs["entries"][:3]] == ["conditions", "approved", "approved"]
    assert logs["summary"]["statuses"]["conditions"] == 1


def test_governance_denied(srv: Live) -> None:
    seller = seller_for(srv)
    run = run_storyboard(SCENARIOS + "governance_denied.yaml", srv.rest(), seller)
    assert (
        run.replies["create_media_buy_denied"]["findings"][0]["category_id"] == "budget_authority"
    )
    assert seller.buys == {}
    assert usage(srv, "comply-gov-denied-plan") == (0, 0)  # a denial holds nothing


def test_governance_denied_recovery(srv: Live) -> None:
    seller = seller_for(srv)
    run = run_storyboard(SCENARIOS + "governance_denied_recovery.yaml", srv.rest(), seller)
    denied = run.replies["create_media_buy_denied"]
    assert denied["findings"][0]["details"]["remaining"] == 10000
    assert list(seller.buys) == [run.replies["create_media_buy_retry"]["media_buy_id"]]
    assert usage(srv, "comply-gov-recovery-plan") == (8000, 0)  # held until an outcome


def test_governance_delivery_monitor(srv: Live) -> None:
    """specialisms/governance-delivery-monitor: intent, completed outcome, delivery-phase
    checks with drift findings, adjustments reported then reviewed, delivery
    observations reconciled (disputed, closed unresolved, measurement variance). The
    seller's own tools are left out as the official runner leaves them out, with the
    media buy the storyboard seeds in place of create_media_buy's."""
    run = run_storyboard(
        "specialisms/governance-delivery-monitor/index.yaml",
        srv.rest(),
        None,
        skip=frozenset({"create_media_buy", "get_media_buy_delivery"}),
        context={"media_buy_id": "mb_acme_q2_2026"},
        reviewer=srv.rest(srv.key("buyer-agent", "agent")),  # maker-checker: another key
    )
    drift = run.replies["check_governance_drift"]
    assert drift["verdict"] == "approved" and drift["check_type"] == "execution"
    assert {f["severity"] for f in drift["findings"]} == {"warning"}
    final = run.replies["review_accept_variance_credit"]["plan_summary"]
    assert final["ledger_committed"] == 35000 and final["budget_remaining"] == 5000
    # The restored 5000 is spendable again in the spend ledger, and no more.
    plan_id = "gov_acme_delivery_monitor"
    assert usage(srv, plan_id) == (0, 40000)
    with srv.rt.store.transaction() as tx:
        cap = tx.budget(budget_id_for("buyer-agent", plan_id)).cap
    assert cap == 45000
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": [plan_id], "include_entries": True})
    budget = logs.body["plans"][0]["budget"]
    assert budget["net_cost"] == 30000 and budget["headroom_restored"] == 5000
    types = [e["type"] for e in logs.body["plans"][0]["entries"]]
    assert types.count("adjustment") == 3
