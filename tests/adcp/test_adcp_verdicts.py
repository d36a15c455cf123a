"""check_governance verdicts of every kind, human review on the approval desk, outcomes
settled on the spend ledger, and the audit chain — over a real server, every reply
validated (seed envelope + task schema)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from adcp_helpers import Live, adcp_entries, intent, live, plan
from conftest import DEFAULT_POLICY, TEST_IKM, write_key

from warden.adcp.state import budget_id_for
from warden.adcp.token_verifier import (
    GovernanceTokenVerifier,
    InMemoryJtiReplayStore,
    StaticJwks,
)
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.settings import Settings
from warden.spend.budgets import Period, period_key


@pytest.fixture
def srv(tmp_path: Any, database_url: str) -> Iterator[Live]:
    """A server on SQLite and on PostgreSQL (``database_url`` is parametrized)."""
    data = tmp_path / "data"
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=DEFAULT_POLICY,
            key_file=write_key(data / "ikm.key"),
            database_url=database_url,
        )
    )
    try:
        with live(rt) as s:
            yield s
    finally:
        rt.close()


def key() -> str:
    return str(uuid.uuid4())


def sync(srv: Live, *plans: dict[str, Any]) -> None:
    r = srv.rest().call("sync_plans", {"idempotency_key": key(), "plans": list(plans)})
    assert r.status == 200, r.body


def usage(srv: Live, plan_id: str) -> tuple[Decimal, Decimal]:
    with srv.rt.store.transaction() as tx:
        return tx.usage(
            budget_id_for("buyer-agent", plan_id), period_key(Period.NONE, srv.rt.spend.now())
        )  # type: ignore[no-any-return]


def test_approved_denied_and_token(srv: Live) -> None:
    sync(srv, plan("p", total=1000))
    req = intent("p", 600)
    ok = srv.rest().call("check_governance", req)
    assert ok.body["verdict"] == "approved" and ok.body["check_type"] == "intent"
    assert usage(srv, "p") == (600, 0)
    # The token is a seller-verifiable authorization of exactly this payload.
    jwks = srv.http.get("/.well-known/jwks.json").json()
    assert srv.rt.adcp is not None
    issuer = srv.rt.adcp.state.signer.issuer
    verifier = GovernanceTokenVerifier(
        audience="https://seller.example.com",
        jwks=StaticJwks({issuer: jwks}),
        replay_store=InMemoryJtiReplayStore(),
    )
    verified = verifier.verify(
        ok.body["governance_context"],
        caller="https://pinnacle-agency.example",
        task="create_media_buy",
        payload=req["payload"],
        commitment={"amount": 600, "currency": "USD"},
        buyer_issuers=[issuer],
    )
    assert verified.claims["check_id"] == ok.body["check_id"]
    assert verified.claims["authorized_commitment"] == {"amount": 600, "currency": "USD"}
    # 600 held of 1000: another 600 is denied with a critical budget finding.
    denied = srv.rest().call("check_governance", intent("p", 600))
    assert denied.body["verdict"] == "denied"
    finding = denied.body["findings"][0]
    assert finding["category_id"] == "budget_authority" and finding["severity"] == "critical"
    assert "governance_context" not in denied.body and "expires_at" not in denied.body
    assert usage(srv, "p") == (600, 0)
    # A buy outside the plan's flight is denied too; so is another currency.
    late = intent("p", 10)
    late["payload"]["end_time"] = "2100-01-01T00:00:00Z"
    assert srv.rest().call("check_governance", late).body["findings"][0]["category_id"] == "flight"
    eur = intent("p", 10, proposed_commitment={"amount": 10, "currency": "EUR"})
    assert srv.rest().call("check_governance", eur).body["verdict"] == "denied"


def test_policy_rule_asks_a_human_who_approves(srv: Live) -> None:
    sync(srv, plan("big", total=1_000_000))
    r = srv.rest().call("check_governance", intent("big", 300_000))  # the bundle asks > 250000
    assert r.status == 202 and r.body["status"] == "submitted"
    task_id = r.body["task_id"]
    assert usage(srv, "big") == (0, 0)  # nothing held while a human decides
    pending = srv.rest().call("get_task_status", {"task_id": task_id})
    assert pending.body["status"] == "submitted" and "result" not in pending.body
    # Another agent cannot see it: the same answer as an unknown task.
    other = srv.key("other-agent", "agent")
    assert (
        srv.rest(other).call("get_task_status", {"task_id": task_id}).code == "REFERENCE_NOT_FOUND"
    )
    # The requesting agent cannot decide its own review (maker-checker) ...
    own = srv.http.post(
        f"/v1/approvals/{task_id}/approve",
        json={"reason": "mine"},
        headers={"Authorization": f"Bearer {srv.agent_token}"},
    )
    assert own.status_code == 403
    # ... a finance approver decides it over the approvals API.
    alice = srv.key("alice", "approver", ("finance",))
    voted = srv.http.post(
        f"/v1/approvals/{task_id}/approve",
        json={"reason": "budget checked"},
        headers={"Authorization": f"Bearer {alice}"},
    )
    assert voted.status_code == 200, voted.text
    done = srv.rest().call("get_task_status", {"task_id": task_id})
    assert done.body["status"] == "completed" and done.body["task_type"] == "check_governance"
    result = done.body["result"]
    assert result["verdict"] == "approved" and result["governance_context"]
    assert usage(srv, "big") == (300_000, 0)
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["big"]}).body["plans"][0]
    assert logs["summary"]["statuses"]["human_reviewed"] == 1
    assert logs["summary"]["escalations"][0]["resolution"] == "approved_by_human"


def test_human_review_required_plan_denied_by_human(srv: Live) -> None:
    sync(srv, plan("reviewed", total=1000, human_review_required=True))
    r = srv.rest().call("check_governance", intent("reviewed", 100))
    assert r.body["status"] == "submitted"
    bob = srv.key("bob", "approver", ("finance",))
    denied = srv.http.post(
        f"/v1/approvals/{r.body['task_id']}/deny",
        json={"reason": "not this quarter"},
        headers={"Authorization": f"Bearer {bob}"},
    )
    assert denied.status_code == 200, denied.text
    done = srv.rest().call("get_task_status", {"task_id": r.body["task_id"]})
    result = done.body["result"]
    assert (
        result["verdict"] == "denied" and "not this quarter" in result["findings"][0]["explanation"]
    )
    assert usage(srv, "reviewed") == (0, 0)


def test_reallocation_threshold_routes_to_the_desk(srv: Live) -> None:
    p = plan("realloc", total=10_000)
    p["budget"]["reallocation_threshold"] = 1000
    sync(srv, p)
    small = intent("realloc", 500, tool="update_media_buy")
    assert srv.rest().call("check_governance", small).body["verdict"] == "approved"
    big = intent("realloc", 2000, tool="update_media_buy")
    assert srv.rest().call("check_governance", big).body["status"] == "submitted"
    # A first commitment (create_media_buy) is not a reallocation.
    assert (
        srv.rest().call("check_governance", intent("realloc", 2000)).body["verdict"] == "approved"
    )


def test_conditions_modern_and_legacy(srv: Live) -> None:
    policy = {"policy_id": "weekly", "enforcement": "must", "policy": "Weekly reporting."}
    sync(srv, plan("cond", total=1000, custom_policies=[policy]))
    modern = srv.rest().call("check_governance", intent("cond", 100))
    assert modern.body["verdict"] == "conditions" and modern.body["check_type"] == "intent"
    assert "governance_context" not in modern.body and modern.body["consultation_context"]
    assert usage(srv, "cond") == (0, 0)
    # A re-check citing an unknown consultation is refused; the real one is approved.
    bad = intent("cond", 100, consultation_context="consult_nope")
    assert srv.rest().call("check_governance", bad).code == "REFERENCE_NOT_FOUND"
    ok = intent("cond", 100, consultation_context=modern.body["consultation_context"])
    ok["payload"]["ext"] = {"governance_policy_acknowledgements": ["weekly"]}
    assert srv.rest().call("check_governance", ok).body["verdict"] == "approved"
    # A 3.0/3.1-shaped request (no proposed_commitment) gets the legacy conditional
    # approval: conditions that bind, with a token.
    legacy = intent("cond", 100)
    del legacy["proposed_commitment"]
    r = srv.rest().call("check_governance", legacy)
    assert r.body["verdict"] == "conditions" and "check_type" not in r.body
    assert r.body["governance_context"] and r.body["conditions"]
    assert usage(srv, "cond") == (200, 0)


def test_outcomes_settle_once_and_execution_checks(srv: Live) -> None:
    sync(srv, plan("o", total=1000))
    a = srv.rest().call("check_governance", intent("o", 400)).body
    b = srv.rest().call("check_governance", intent("o", 300)).body
    token = a["governance_context"]
    # The seller's execution check: within the authorization, then beyond it.
    execution = {
        "caller": "https://seller.example.com",
        "governance_context": token,
        "planned_delivery": {"media_buy_id": "mb_1", "total_budget": 400, "currency": "USD"},
    }
    ex = srv.rest().call("check_governance", execution).body
    assert ex["verdict"] == "approved" and ex["check_type"] == "execution" and ex["plan_id"] == "o"
    too_much = {
        **execution,
        "planned_delivery": {**execution["planned_delivery"], "total_budget": 401},
    }
    assert srv.rest().call("check_governance", too_much).body["verdict"] == "denied"
    forged = {**execution, "governance_context": token[:-4] + "AAAA"}
    assert srv.rest().call("check_governance", forged).code == "INVALID_REQUEST"
    # A 3.2 client may not send both plan_id and governance_context; an older client's
    # plan_id beside the token is ignored when it names the token's plan.
    both = {**execution, "plan_id": "o", "adcp_version": "3.2"}
    assert srv.rest().call("check_governance", both).code == "INVALID_REQUEST"
    other_plan = {**execution, "plan_id": "elsewhere", "payload": {"total_budget": 1}}
    assert srv.rest().call("check_governance", other_plan).code == "INVALID_REQUEST"
    legacy = {**execution, "plan_id": "o", "payload": {"total_budget": 1}}
    assert srv.rest().call("check_governance", legacy).body["verdict"] == "approved"

    def outcome(check: dict[str, Any], kind: str, **extra: Any) -> Any:
        body = {
            "idempotency_key": key(),
            "plan_id": "o",
            "check_id": check["check_id"],
            "governance_context": check["governance_context"],
            "outcome": kind,
            **extra,
        }
        return srv.rest().call("report_plan_outcome", body)

    over = outcome(a, "completed", seller_response={"committed_budget": 401})
    assert over.code == "BUDGET_EXCEEDED"
    done = outcome(a, "completed", seller_response={"committed_budget": 350})
    assert done.body["outcome_state"] == "accepted" and done.body["committed_budget"] == 350
    assert usage(srv, "o") == (300, 350)
    again = outcome(a, "failed", error={"code": "X", "message": "late"})
    assert again.code == "INVALID_STATE"
    # After its terminal outcome, a purchase execution check on that action is denied.
    assert srv.rest().call("check_governance", execution).body["verdict"] == "denied"
    wrong_token = outcome(b, "failed", error={"code": "X", "message": "no"})
    assert wrong_token.status == 200
    assert usage(srv, "o") == (0, 350)  # the failed action's hold is released
    mismatch = {
        "idempotency_key": key(),
        "plan_id": "o",
        "check_id": b["check_id"],
        "governance_context": token,
        "outcome": "completed",
        "seller_response": {"committed_budget": 1},
    }
    assert srv.rest().call("report_plan_outcome", mismatch).code in (
        "INVALID_REQUEST",
        "INVALID_STATE",
    )
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["o"], "include_entries": True})
    plan_log = logs.body["plans"][0]
    assert plan_log["budget"]["committed"] == 350 and plan_log["budget"]["remaining"] == 650
    assert [e["type"] for e in plan_log["entries"]].count("outcome") == 2
    assert {a["status"] for a in plan_log["governed_actions"]} == {"completed"}


def test_every_state_change_is_on_the_verified_chain(srv: Live) -> None:
    sync(srv, plan("chain", total=100))
    c = srv.rest().call("check_governance", intent("chain", 10)).body
    srv.rest().call("check_governance", intent("chain", 1000))  # denied: still recorded
    srv.rest().call(
        "report_plan_outcome",
        {
            "idempotency_key": key(),
            "plan_id": "chain",
            "check_id": c["check_id"],
            "governance_context": c["governance_context"],
            "outcome": "completed",
            "seller_response": {"committed_budget": 10},
        },
    )
    srv.rest().call("check_governance", {"plan_id": "nope", "caller": "https://x.example"})  # error
    steps = [e["step_type"] for e in adcp_entries(srv.rt)]
    assert steps == [
        "warden/adcp.plan_synced",
        "warden/adcp.check",
        "warden/adcp.check",
        "warden/adcp.outcome",
    ]
    verdicts = [e["adcp"]["verdict"] for e in adcp_entries(srv.rt) if "verdict" in e["adcp"]]
    assert verdicts == ["approved", "denied"]
    report = verify_records(srv.rt.store.iter_records(), ikm=TEST_IKM)
    assert report.signatures_checked > 0


def test_unanswered_review_resolves_to_denied(srv: Live) -> None:
    from datetime import UTC, datetime, timedelta

    sync(srv, plan("slow", total=1000, human_review_required=True))
    r = srv.rest().call("check_governance", intent("slow", 100))
    later = datetime.now(UTC) + timedelta(hours=25)  # plan reviews stay open 24 h
    srv.rt.desk.clock = lambda: later
    done = srv.rest().call("get_task_status", {"task_id": r.body["task_id"]})
    assert done.body["status"] == "completed"
    assert done.body["result"]["verdict"] == "denied"
    assert done.body["result"]["findings"][0]["category_id"] == "human_review"
    assert usage(srv, "slow") == (0, 0)
