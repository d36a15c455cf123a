"""require_approval → the approval desk (maker-checker) → approval events → the outcome.

The control rule: no tool call is recorded after ``block``, nor after
``require_approval`` before a checker (never the maker) approved; the outcome consumes
the approval (one step only). Every answer's envelope is checked (kla_wire_helpers).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from kla_wire_helpers import (
    BASIC,
    CREDIT,
    Caller,
    assert_error,
    db_rows,
    key,
    load,
)

from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Role
from warden.kla import verify_record_value
from warden.kla.evidence import execution_session_id
from warden.kla.keys import KeyRegistry
from warden.kla.verify import verify_signature
from warden.runtime import Runtime

RID = "req_action_demo_0002"
EXECUTION = "exec_credit_review_demo_0001"
TOOL = {"name": "credit.dispose", "params_digest": "sha256:" + "ab" * 32}
DONE = {
    "tool_call": TOOL,
    "outcome": {"status": "succeeded", "result_digest": "sha256:" + "cd" * 32},
}


@pytest.fixture
def agent(runtime: Runtime, app_client: TestClient) -> Caller:
    return key(runtime, app_client, "bot-1", Role.AGENT)


@pytest.fixture
def fay(runtime: Runtime, app_client: TestClient) -> Caller:
    return key(runtime, app_client, "fay", Role.APPROVER, "finance")


def submit_credit(agent: Caller) -> str:
    r = agent.submit(CREDIT)
    assert r.status == 200 and r.data["decision"]["decision"] == "require_approval", r.body
    return str(r.data["task"]["id"])


def chain_types(rt: Runtime) -> list[str]:
    sid = execution_session_id(EXECUTION)
    return [
        r[0]
        for r in db_rows(
            rt, f"SELECT step_type FROM entries WHERE session_id = '{sid}' ORDER BY seq"
        )
    ]


def test_a_checker_approves_then_the_outcome_is_recorded_once(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    tid = submit_credit(agent)
    # No tool effect before approval: the outcome is refused, pointing at the task.
    early = assert_error(
        agent.outcome(RID, DONE), "record:not_authorized", 409, resolution="human_approval"
    )
    assert early["resolution"] == {"type": "human_approval", "taskId": tid}
    approved = fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "within mandate"})
    assert approved.status == 200 and approved.data["task"]["state"] == "approved"
    shown = agent.show(RID)
    assert shown.data["status"] == "approved"
    (event,) = shown.data["approval_events"]
    record = event["record"]
    assert record["outcome"] == "approve" and record["task_id"] == tid
    assert record["maker"] == {"principal": "bot-1.owner"}  # the agent's registered owner
    assert record["checker"]["principal"] == "fay" and record["reason"] == "within mandate"
    assert record["policy_decision_id"] == shown.data["decision"]["id"]
    assert record["correlation"] == load(CREDIT)["correlation"]
    # Valid, signed by Warden's key, and chained on the execution's chain.
    assert verify_record_value(record, expected_digest=event["digest"]).ok
    keys = agent.call("GET", "/v1/keys").data
    public = KeyRegistry(
        {k["kid"]: _key(k) for k in keys["keys"]}
    ).get_key(event["kid"])  # fmt: skip
    assert verify_signature(public, event["digest"], event["signature"])
    assert chain_types(runtime) == [
        "warden/kla.action_request",
        "warden/kla.policy_decision",
        "warden/kla.approval_event",
    ]
    # Now the outcome: the audit event ties request, decision, approval, tool call, outcome.
    done = agent.outcome(RID, DONE)
    assert done.status == 200, done.body
    audit = done.data["audit_event"]["record"]
    assert audit["approval_event"] == {
        "approval_event_id": event["id"],
        "digest": event["digest"],
        "outcome": "approve",
    }
    assert audit["tool_call"] == TOOL and audit["outcome"] == DONE["outcome"]
    assert audit["policy_decision"]["decision"] == "require_approval"
    assert chain_types(runtime)[-1] == "warden/kla.audit_event"
    # The approval was consumed by this step.
    task = runtime.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CONSUMED
    assert agent.show(RID).data["status"] == "completed"
    # The same report again replays; a different one conflicts.
    again = agent.outcome(RID, DONE)
    assert again.status == 200 and again.body["replayed"] is True
    assert again.data == done.data
    other = {"tool_call": TOOL, "outcome": {"status": "failed"}}
    assert_error(agent.outcome(RID, other), "record:conflict", 409, resolution="retry")


def _key(jwk: dict[str, str]) -> Any:
    from warden.kla.keys import public_key_from_jwk

    return public_key_from_jwk(jwk)[1]


@pytest.mark.parametrize("role", [Role.AGENT, Role.ADMIN])
def test_the_maker_cannot_approve_even_with_an_approver_or_admin_key(
    runtime: Runtime, app_client: TestClient, role: Role
) -> None:
    maker = key(runtime, app_client, "carol", role, "finance")
    tid = submit_credit(maker)
    # carol's approver key: same principal, still the maker.
    carol_approver = key(runtime, app_client, "carol", Role.APPROVER, "finance")
    for who in (carol_approver, maker) if role is Role.ADMIN else (carol_approver,):
        r = who.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "mine"})
        assert_error(r, "approval:not_permitted", 403)
    assert maker.show(RID).data["status"] == "awaiting_approval"
    assert maker.show(RID).data["approval_events"] == []
    assert_error(
        maker.outcome(RID, DONE), "record:not_authorized", 409, resolution="human_approval"
    )


def test_a_deny_is_recorded_and_no_tool_call_may_follow(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    tid = submit_credit(agent)
    denied = fay.call("POST", f"/v1/approvals/{tid}/deny", {"reason": "over the limit"})
    assert denied.status == 200
    shown = agent.show(RID)
    assert shown.data["status"] == "denied"
    assert [e["record"]["outcome"] for e in shown.data["approval_events"]] == ["deny"]
    refused = assert_error(agent.outcome(RID, DONE), "record:not_authorized", 409)
    assert "denied" in refused["message"]
    done = agent.outcome(RID, {"outcome": {"status": "denied"}})
    assert done.status == 200
    audit = done.data["audit_event"]["record"]
    assert audit["approval_event"]["outcome"] == "deny" and "tool_call" not in audit


def test_a_re_route_is_an_approval_event_and_the_new_group_decides(
    runtime: Runtime, app_client: TestClient, agent: Caller, fay: Caller
) -> None:
    tid = submit_credit(agent)
    r = fay.call("POST", f"/v1/approvals/{tid}/reroute", {"group": "risk", "reason": "risk first"})
    assert r.status == 200
    rick = key(runtime, app_client, "rick", Role.APPROVER, "risk")
    assert rick.call("POST", f"/v1/approvals/{tid}/approve", {}).status == 200
    events = [e["record"] for e in agent.show(RID).data["approval_events"]]
    assert [(e["outcome"], e["checker"]["principal"]) for e in events] == [
        ("re_route", "fay"),
        ("approve", "rick"),
    ]
    assert events[0]["routed_to"] == "risk" and "routed_to" not in events[1]
    assert events[1]["reason"] == "approve (no reason given)"
    assert agent.outcome(RID, DONE).status == 200


def test_a_blocked_request_takes_no_tool_call(runtime: Runtime, agent: Caller) -> None:
    record = load(BASIC) | {"action": "delete_case", "environment": "production"}
    assert agent.submit(record).data["decision"]["decision"] == "block"
    rid = record["action_request_id"]
    refused = assert_error(agent.outcome(rid, DONE), "record:not_authorized", 409)
    assert "blocked" in refused["message"]
    wrong = assert_error(
        agent.outcome(rid, {"outcome": {"status": "cancelled"}}),
        "record:schema_invalid",
        400,
        resolution="retry",
    )
    assert "block decision" in wrong["message"]
    done = agent.outcome(rid, {"outcome": {"status": "blocked"}})
    assert done.status == 200
    assert done.data["audit_event"]["record"]["outcome"] == {"status": "blocked"}


def test_an_allowed_request_records_its_outcome(agent: Caller) -> None:
    assert agent.submit(BASIC).status == 200
    bad = agent.outcome("req_action_demo_0001", {"outcome": {"status": "succeeded"}})
    assert_error(bad, "record:schema_invalid", 400, resolution="retry")
    extra = agent.outcome("req_action_demo_0001", {**DONE, "result": "raw output"})
    assert_error(extra, "input:invalid", 400, resolution="retry")
    done = agent.outcome("req_action_demo_0001", DONE)
    assert done.status == 200 and "approval_event" not in done.data["audit_event"]["record"]
    assert_error(agent.outcome("req_nope", DONE), "record:not_found", 404, resolution="retry")


def test_an_expired_approval_authorizes_nothing(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    from datetime import UTC, datetime, timedelta

    tid = submit_credit(agent)
    assert fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"}).status == 200
    later = datetime.now(UTC) + timedelta(days=3)
    runtime.desk.clock = lambda: later  # the grant lapses (it lives as long as the ask was open)
    refused = assert_error(agent.outcome(RID, DONE), "record:not_authorized", 409)
    assert "cannot be used" in refused["message"]
    assert agent.outcome(RID, {"outcome": {"status": "expired"}}).status == 200


@pytest.mark.parametrize("status", ["denied", "expired", "blocked", "failed"])
def test_an_outcome_cannot_contradict_a_pending_approval(
    runtime: Runtime, agent: Caller, status: str
) -> None:
    tid = submit_credit(agent)
    refused = assert_error(
        agent.outcome(RID, {"outcome": {"status": status}}), "record:not_authorized", 409
    )
    assert "awaiting approval" in refused["message"]
    assert runtime.desk.get(tid).state is ApprovalState.PENDING  # type: ignore[union-attr]


def test_an_allowed_request_cannot_claim_a_denial(agent: Caller) -> None:
    assert agent.submit(BASIC).status == 200
    for status in ("denied", "expired", "blocked"):
        assert_error(
            agent.outcome("req_action_demo_0001", {"outcome": {"status": status}}),
            "record:not_authorized",
            409,
        )


def test_cancelling_a_pending_request_withdraws_its_task(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    tid = submit_credit(agent)
    assert agent.outcome(RID, {"outcome": {"status": "cancelled"}}).status == 200
    task = runtime.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CANCELED
    assert task.history[-1]["event"] == "canceled"
    assert_error(
        fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "late"}),
        "approval:task_conflict",
        409,
        resolution="retry",
    )
