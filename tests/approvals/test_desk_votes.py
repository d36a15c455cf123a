"""Votes on the approval desk (issue 14 item 5): a vote cast with a key that is revoked
before the task completes does not count, and re-routing a task clears its votes.

Real signed ACS steps file the tasks; approvers are API keys in the same database. Every
test runs on SQLite and on PostgreSQL (the counting reads the key table in the database,
so it holds across replicas).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import assert_valid_response, asset, service_client

from warden.approvals.desk import TaskConflict, desk_session_id
from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Identity, Role
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient

DESK = asset("approvals/desk.yaml")
WIRE = {"to": "acct-9", "usd": "900"}


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(DESK)


@pytest.fixture
def agent(rt: Runtime) -> AcsClient:
    client = service_client(rt, agent_id="agent-7")
    client.hello()
    return client


def step(client: AcsClient, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    response = client.tool_call(tool, args)
    assert_valid_response(response)
    out: dict[str, Any] = response["result"]
    return out


def approver(rt: Runtime, name: str, *groups: str) -> Identity:
    who, _ = rt.api_keys.create(name, Role.APPROVER, groups)
    return who


def test_a_vote_whose_key_is_revoked_before_completion_does_not_count(
    rt: Runtime, agent: AcsClient
) -> None:
    tid = step(agent, "wire_money", WIRE)["ask_details"]["task_id"]
    fay, gus = approver(rt, "fay", "finance"), approver(rt, "gus", "finance")
    assert rt.desk.approve(tid, fay, "looks right").state is ApprovalState.PENDING
    assert rt.api_keys.revoke(fay.key_id)
    # Fay's vote was one of two; with her key revoked, Gus's is the only one that counts.
    after_gus = rt.desk.approve(tid, gus, "agreed")
    assert after_gus.state is ApprovalState.PENDING
    assert [v.principal for v in after_gus.approvals()] == ["gus"]
    void = [v for v in after_gus.votes if v.void]
    assert [(v.principal, v.void) for v in void] == [("fay", "key revoked")]
    assert step(agent, "wire_money", WIRE)["decision"] == "ask"
    shown = rt.desk.get(tid)
    assert shown is not None and len(shown.approvals()) == 1
    # Fay, with a new active key, may vote again: her revoked vote is void.
    fay_new, _ = rt.api_keys.create("fay", Role.APPROVER, ["finance"])
    done = rt.desk.approve(tid, fay_new, "again, with my new key")
    assert done.state is ApprovalState.APPROVED
    assert sorted((v.principal, v.key_id) for v in done.approvals()) == sorted(
        [("gus", gus.key_id), ("fay", fay_new.key_id)]
    )
    allowed = step(agent, "wire_money", WIRE)
    assert allowed["decision"] == "allow"
    assert sorted(a["principal"] for a in allowed["policy_data"]["approval"]["approvals"]) == [
        "fay",
        "gus",
    ]


def test_a_read_shows_a_revoked_vote_as_void(rt: Runtime, agent: AcsClient) -> None:
    tid = step(agent, "wire_money", WIRE)["ask_details"]["task_id"]
    fay = approver(rt, "fay", "finance")
    rt.desk.approve(tid, fay, "ok")
    rt.api_keys.revoke(fay.key_id)
    task = rt.desk.get(tid)
    assert task is not None and task.approvals() == []
    assert task.to_dict()["votes"][0]["void"] == "key revoked"
    listed = rt.desk.list()
    assert [len(t.approvals()) for t in listed] == [0]


def test_a_revocation_after_completion_leaves_the_approval(rt: Runtime, agent: AcsClient) -> None:
    tid = step(agent, "wire_money", WIRE)["ask_details"]["task_id"]
    fay, gus = approver(rt, "fay", "finance"), approver(rt, "gus", "finance")
    rt.desk.approve(tid, fay, "ok")
    assert rt.desk.approve(tid, gus, "ok").state is ApprovalState.APPROVED
    rt.api_keys.revoke(fay.key_id)
    assert step(agent, "wire_money", WIRE)["decision"] == "allow"


def test_rerouting_clears_the_votes_and_is_chained(rt: Runtime, agent: AcsClient) -> None:
    tid = step(agent, "wire_money", WIRE)["ask_details"]["task_id"]
    fay = approver(rt, "fay", "finance")
    ops1, ops2 = approver(rt, "olga", "operators"), approver(rt, "otto", "operators")
    rt.desk.approve(tid, fay, "fine by finance")
    rerouted = rt.desk.reroute(tid, fay, "operators", "operators should look too")
    assert rerouted.approver_group == "operators" and rerouted.votes == ()
    assert rerouted.history[-1]["event"] == "rerouted"
    assert rerouted.history[-1]["votes_cleared"] == [
        {"principal": "fay", "key_id": fay.key_id, "decision": "approve"}
    ]
    # One operator's approval is one of two: fay's finance vote no longer counts.
    assert rt.desk.approve(tid, ops1, "ok").state is ApprovalState.PENDING
    assert step(agent, "wire_money", WIRE)["decision"] == "ask"
    assert rt.desk.approve(tid, ops2, "ok").state is ApprovalState.APPROVED
    # The audit chain carries the cleared votes on the rerouted entry.
    entries = [r["entry"] for r in rt.store.iter_records(desk_session_id()) if r["kind"] == "entry"]
    rerouted_entries = [e for e in entries if e["step_type"] == "warden/approval.rerouted"]
    assert len(rerouted_entries) == 1
    assert rerouted_entries[0]["approval"]["votes_cleared"] == [
        {"principal": "fay", "key_id": fay.key_id, "decision": "approve"}
    ]


def test_a_rerouted_task_accepts_a_fresh_vote_from_an_earlier_voter(
    rt: Runtime, agent: AcsClient
) -> None:
    tid = step(agent, "wire_money", WIRE)["ask_details"]["task_id"]
    admin = approver(rt, "ada", "finance", "operators")
    rt.desk.approve(tid, admin, "first")
    with pytest.raises(TaskConflict, match="already voted"):
        rt.desk.approve(tid, admin, "twice")
    rt.desk.reroute(tid, admin, "operators", "")
    assert len(rt.desk.approve(tid, admin, "in the new group").approvals()) == 1


@pytest.mark.parametrize("reason", ["", " \t", "\u200b", "\u2060\ufeff\u0000"])
def test_the_desk_refuses_a_deny_that_says_nothing(
    rt: Runtime, agent: AcsClient, reason: str
) -> None:
    """Decision 973: the desk itself (every caller of ``ApprovalDesk.deny``) refuses a
    reason without a visible character, before anything is read or written."""
    from warden.approvals.desk import DeskError

    tid = step(agent, "wire_money", WIRE)["ask_details"]["task_id"]
    fay = approver(rt, "fay", "finance")
    with pytest.raises(DeskError, match="a deny must say why; a reason needs a visible"):
        rt.desk.deny(tid, fay, reason)
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.PENDING and task.votes == ()
    assert rt.desk.deny(tid, fay, "\u200bno").state is ApprovalState.DENIED
