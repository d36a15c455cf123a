"""The approval desk on the ACS wire: argument-bound, single-use, maker-checker grants.

Each test drives real signed ACS steps in process against a runtime on a SQLite file,
decides tasks through the desk as API-key identities, and checks the step's answer,
the task, and the desk's audit chain.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from conftest import (
    TEST_IKM,
    agent_client,
    assert_valid_response,
    asset,
    ensure_agent,
    service_client,
)

from warden.approvals.desk import NotPermitted, TaskConflict, desk_session_id
from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Identity, Role
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient

DESK = asset("approvals/desk.yaml")


def result(response: dict[str, Any]) -> dict[str, Any]:
    assert_valid_response(response)
    out: dict[str, Any] = response["result"]
    return out


def approver(rt: Runtime, name: str, *groups: str, role: Role = Role.APPROVER) -> Identity:
    ensure_agent(rt, name, role)
    who, _ = rt.api_keys.create(name, role, groups)
    return who


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    """Every test here runs on SQLite and on PostgreSQL."""
    return make_backend_runtime


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(DESK)


@pytest.fixture
def agent(rt: Runtime) -> AcsClient:
    client = service_client(rt, agent_id="agent-7")
    client.hello()
    return client


def ask(client: AcsClient, tool: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return result(client.tool_call(tool, args, **kw))


def test_an_ask_files_a_task_bound_to_the_exact_action(rt: Runtime, agent: AcsClient) -> None:
    r = ask(
        agent,
        "delete_file",
        {"path": "/srv/a", "force": True},
        metadata={"user_context": {"user_id": "bob"}, "turn_id": "t1"},
    )
    assert r["decision"] == "ask"
    assert "approval_pending" in r["reason_codes"]
    details = r["ask_details"]
    task = rt.desk.get(details["task_id"])
    assert task is not None and task.state is ApprovalState.PENDING
    assert details["task_url"].endswith(f"/desk/tasks/{task.id}")
    # The time left, rounded up: the full 600 s unless a second passed since filing.
    assert details["timeout_seconds"] in (599, 600)
    assert task.action == {
        "method": "steps/toolCallRequest",
        "name": "delete_file",
        "arguments": {"path": "/srv/a", "force": True},
    }
    assert len(task.action_hash) == 64
    assert task.scope == agent.session_id
    # The maker is the verified agent and its owner; the user_id is the agent's claim.
    assert task.requester.agent_id == "agent-7"
    assert task.requester.principal == "agent-7.owner"
    assert task.requester.claimed_user_id == "bob"
    assert task.correlation == {
        "session_id": agent.session_id,
        "agent_id": "agent-7",
        "turn_id": "t1",
    }
    assert task.policy["bundle"]["id"] == "desk-test"
    assert task.policy["bundle"]["version"] == "2.0.0"
    assert task.policy["rules"] == ["delete-asks"]
    assert task.approver_group == "operators" and task.approvals_required == 1
    assert (task.expires_at - task.created_at) == timedelta(seconds=600)
    # Asking again while pending names the same task (no duplicate for the approvers).
    again = ask(agent, "delete_file", {"path": "/srv/a", "force": True})
    assert again["ask_details"]["task_id"] == task.id
    assert len(rt.desk.list()) == 1


def test_approval_allows_the_identical_resubmission_once(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    alice = approver(rt, "alice", "operators")
    assert rt.desk.approve(tid, alice, "checked the path").state is ApprovalState.APPROVED
    allowed = ask(agent, "delete_file", {"path": "/srv/a"})
    assert allowed["decision"] == "allow"
    assert "approval_granted" in allowed["reason_codes"]
    assert allowed["policy_data"]["approval"]["task_id"] == tid
    assert allowed["policy_data"]["approval"]["approvals"][0]["principal"] == "alice"
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CONSUMED
    assert task.consumed_by is not None and task.consumed_by["session_id"] == agent.session_id
    # Single use: the same step again is a new ask, not an allow.
    again = ask(agent, "delete_file", {"path": "/srv/a"})
    assert again["decision"] == "ask"
    assert again["ask_details"]["task_id"] != tid


def test_a_changed_argument_does_not_match_the_grant(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "operators"), "")
    changed = ask(agent, "delete_file", {"path": "/srv/b"})
    assert changed["decision"] == "ask" and changed["ask_details"]["task_id"] != tid
    # Citing the grant for a changed action is refused outright.
    cited = ask(agent, "delete_file", {"path": "/srv/c"}, metadata={"approval_task_id": tid})
    assert cited["decision"] == "deny"
    assert "grant_invalid" in cited["reason_codes"]
    # The grant is still there for the action it was given for.
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.APPROVED
    assert ask(agent, "delete_file", {"path": "/srv/a"})["decision"] == "allow"


def test_a_grant_is_bound_to_its_session(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "operators"), "")
    other = service_client(rt, agent_id="agent-7")
    other.hello()
    elsewhere = ask(other, "delete_file", {"path": "/srv/a"}, metadata={"approval_task_id": tid})
    assert elsewhere["decision"] == "deny" and "grant_invalid" in elsewhere["reason_codes"]
    assert ask(other, "delete_file", {"path": "/srv/a"})["decision"] == "ask"


def test_a_replayed_approval_is_refused(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "operators"), "")
    assert (
        ask(agent, "delete_file", {"path": "/srv/a"}, metadata={"approval_task_id": tid})[
            "decision"
        ]
        == "allow"
    )
    replay = ask(agent, "delete_file", {"path": "/srv/a"}, metadata={"approval_task_id": tid})
    assert replay["decision"] == "deny"
    assert "grant_invalid" in replay["reason_codes"]
    with pytest.raises(TaskConflict):
        rt.desk.approve(tid, approver(rt, "carol", "operators"), "again")


@pytest.mark.parametrize("who", ["agent-7", "agent-7.owner"])
def test_the_requester_cannot_approve_its_own_task(rt: Runtime, agent: AcsClient, who: str) -> None:
    r = ask(agent, "delete_file", {"path": "/x"}, metadata={"user_context": {"user_id": "bob"}})
    tid = r["ask_details"]["task_id"]
    self_approver = approver(rt, who, "operators", role=Role.ADMIN)
    with pytest.raises(NotPermitted, match="maker-checker"):
        rt.desk.approve(tid, self_approver, "mine")
    with pytest.raises(NotPermitted):
        rt.desk.deny(tid, self_approver, "mine")
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.PENDING and task.votes == ()


def test_an_approver_outside_the_group_cannot_decide(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/x"})["ask_details"]["task_id"]
    with pytest.raises(NotPermitted, match="operators"):
        rt.desk.approve(tid, approver(rt, "frank", "finance"), "")
    # An admin is in every group.
    assert rt.desk.approve(tid, approver(rt, "root", role=Role.ADMIN), "").state is (
        ApprovalState.APPROVED
    )


def test_n_of_m_needs_n_distinct_approvers(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "wire_money", {"to": "acct-9", "usd": "900"})["ask_details"]["task_id"]
    fay, gus = approver(rt, "fay", "finance"), approver(rt, "gus", "finance")
    first = rt.desk.approve(tid, fay, "looks right")
    assert first.state is ApprovalState.PENDING and len(first.approvals()) == 1
    assert ask(agent, "wire_money", {"to": "acct-9", "usd": "900"})["decision"] == "ask"
    with pytest.raises(TaskConflict, match="already voted"):
        rt.desk.approve(tid, fay, "me again")
    # The same person with a second key is still one approver.
    fay_again, _ = rt.api_keys.create("fay", Role.APPROVER, ["finance"])
    with pytest.raises(TaskConflict, match="already voted"):
        rt.desk.approve(tid, fay_again, "second key")
    second = rt.desk.approve(tid, gus, "agreed")
    assert second.state is ApprovalState.APPROVED
    assert [v.principal for v in second.approvals()] == ["fay", "gus"]
    allowed = ask(agent, "wire_money", {"to": "acct-9", "usd": "900"})
    assert allowed["decision"] == "allow"
    assert [a["principal"] for a in allowed["policy_data"]["approval"]["approvals"]] == [
        "fay",
        "gus",
    ]


def test_one_deny_vetoes_and_is_reported_once(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "wire_money", {"to": "x", "usd": "1"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "fay", "finance"), "ok")
    denied = rt.desk.deny(tid, approver(rt, "gus", "finance"), "unknown payee")
    assert denied.state is ApprovalState.DENIED
    r = ask(agent, "wire_money", {"to": "x", "usd": "1"})
    assert r["decision"] == "deny"
    assert "approval_denied" in r["reason_codes"]
    assert "unknown payee" in r["reasoning"]
    # Reported once; asking again files a new task.
    again = ask(agent, "wire_money", {"to": "x", "usd": "1"})
    assert again["decision"] == "ask" and again["ask_details"]["task_id"] != tid


def test_expiry_denies(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/x"})["ask_details"]["task_id"]
    base = rt.desk.clock()
    rt.desk.clock = lambda: base + timedelta(seconds=601)
    r = ask(agent, "delete_file", {"path": "/x"})
    assert r["decision"] == "deny" and "approval_expired" in r["reason_codes"]
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.EXPIRED
    with pytest.raises(TaskConflict, match="expired"):
        rt.desk.approve(tid, approver(rt, "alice", "operators"), "late")


def test_an_unused_grant_lapses(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/x"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "operators"), "")
    base = rt.desk.clock()
    rt.desk.clock = lambda: base + timedelta(seconds=601)
    r = ask(agent, "delete_file", {"path": "/x"})
    assert r["decision"] == "deny" and "approval_expired" in r["reason_codes"]


def test_timeout_disposition_allow_allows_once(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "ping_host", {"host": "db1"})["ask_details"]["task_id"]
    base = rt.desk.clock()
    rt.desk.clock = lambda: base + timedelta(seconds=61)
    assert rt.desk.expire_due() == 1
    r = ask(agent, "ping_host", {"host": "db1"})
    assert r["decision"] == "allow" and "approval_timeout_allow" in r["reason_codes"]
    assert "approval_granted" not in r["reason_codes"]  # nobody approved it
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CONSUMED
    assert ask(agent, "ping_host", {"host": "db1"})["decision"] == "ask"


def test_defer_with_human_approval_goes_to_the_desk(rt: Runtime, agent: AcsClient) -> None:
    r = ask(agent, "deploy", {"service": "api", "version": "1.2"})
    assert r["decision"] == "defer"
    details = r["defer_details"]
    assert details["resolution_method"] == "human_approval"
    assert "approver_group" not in details and "approvals_required" not in details
    task = rt.desk.get(details["task_id"])
    assert task is not None and task.approver_group == "release"
    assert 1000 <= details["resolution_timeout_ms"] <= 120_000
    rt.desk.approve(task.id, approver(rt, "rel", "release"), "window open")
    assert ask(agent, "deploy", {"service": "api", "version": "1.2"})["decision"] == "allow"


def test_reroute_hands_the_task_to_another_group(rt: Runtime, agent: AcsClient) -> None:
    tid = ask(agent, "delete_file", {"path": "/x"})["ask_details"]["task_id"]
    ops, fin = approver(rt, "olga", "operators"), approver(rt, "fay", "finance")
    rerouted = rt.desk.reroute(tid, ops, "finance", "costs money")
    assert rerouted.approver_group == "finance"
    with pytest.raises(NotPermitted):
        rt.desk.approve(tid, ops, "")
    assert rt.desk.approve(tid, fin, "fine").state is ApprovalState.APPROVED


def test_every_transition_is_chained_with_who_and_why(rt: Runtime, agent: AcsClient) -> None:
    t1 = ask(agent, "delete_file", {"path": "/a"})["ask_details"]["task_id"]
    t2 = ask(agent, "delete_file", {"path": "/b"})["ask_details"]["task_id"]
    t3 = ask(agent, "delete_file", {"path": "/c"})["ask_details"]["task_id"]
    ops = approver(rt, "olga", "operators")
    rt.desk.reroute(t1, ops, "operators-2", "wrong team")
    rt.desk.approve(t1, approver(rt, "oz", "operators-2"), "ok by me")
    ask(agent, "delete_file", {"path": "/a"})
    rt.desk.deny(t2, ops, "no")
    base = rt.desk.clock()
    rt.desk.clock = lambda: base + timedelta(seconds=700)
    rt.desk.expire_due()
    entries = [r["entry"] for r in rt.store.iter_records(desk_session_id()) if r["kind"] == "entry"]
    assert all(e["step_type"] == f"warden/approval.{e['approval']['event']}" for e in entries)
    events = [(e["approval"]["task_id"], e["approval"]["event"]) for e in entries]
    assert events == [
        (t1, "requested"),
        (t2, "requested"),
        (t3, "requested"),
        (t1, "rerouted"),
        (t1, "approved"),
        (t1, "consumed"),
        (t2, "denied"),
        (t3, "expired"),
    ]
    by_event = {(e["approval"]["task_id"], e["approval"]["event"]): e for e in entries}
    approved = by_event[(t1, "approved")]["approval"]
    assert approved["by"]["principal"] == "oz" and approved["reason"] == "ok by me"
    assert by_event[(t2, "denied")]["approval"]["by"]["principal"] == "olga"
    requested = by_event[(t1, "requested")]["approval"]
    assert requested["action"]["arguments"] == {"path": "/a"}
    assert requested["policy"]["bundle"]["id"] == "desk-test"
    assert requested["requester"]["agent_id"] == "agent-7"
    # The task's own trail names the same entries.
    task = rt.desk.get(t1)
    assert task is not None
    assert [h["event"] for h in task.history] == ["requested", "rerouted", "approved", "consumed"]
    # warden verify covers the desk chain with everything else.
    report = verify_records(rt.store.iter_records(), ikm=TEST_IKM)
    # The agent's session, the desk's chain and the agent's registration chain.
    assert report.sessions == 3 and report.signatures_checked > 0


def test_a_restart_keeps_pending_tasks(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(DESK)
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/x"})["ask_details"]["task_id"]
    settings = rt.settings
    rt.close()
    rt2 = Runtime.start(settings)
    try:
        task = rt2.desk.get(tid)
        assert task is not None and task.state is ApprovalState.PENDING
        assert [t.id for t in rt2.desk.list()] == [tid]
        rt2.desk.approve(tid, approver(rt2, "alice", "operators"), "after restart")
        again = agent_client(rt2.acs.handle, rt2, agent_id="agent-7", session_id=agent.session_id)
        again.chain_hash = agent.chain_hash
        assert ask(again, "delete_file", {"path": "/x"})["decision"] == "allow"
    finally:
        rt2.close()


@pytest.mark.parametrize("citation", [12345, None, "", "t" * 500, ["task_x"]])
def test_a_malformed_citation_is_grant_invalid(
    rt: Runtime, agent: AcsClient, citation: Any
) -> None:
    meta = {"approval_task_id": citation}
    r = ask(agent, "delete_file", {"path": "/x"}, metadata=meta)
    if citation is None:  # an explicit null cites nothing: a plain ask
        assert r["decision"] == "ask"
        return
    assert r["decision"] == "deny" and "grant_invalid" in r["reason_codes"]
    assert len(r["reasoning"]) < 400  # a huge citation is not echoed back


def test_maker_checker_ignores_case(rt: Runtime, agent: AcsClient) -> None:
    r = ask(agent, "delete_file", {"path": "/x"})
    with pytest.raises(NotPermitted):
        rt.desk.approve(r["ask_details"]["task_id"], approver(rt, "Agent-7.OWNER", "operators"), "")


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "not a url",
        "ftp://x",
        "http://h/?q=1",
        # urlsplit drops these silently; the URL reaches headers and signed links.
        "https://warden.example\nX-Injected: 1",
        "https://warden.example/\r",
        "https://ward\ten.example",
        "https://warden.example/a b",
    ],
)
def test_the_public_url_must_be_an_http_url(url: str) -> None:
    from pydantic import ValidationError

    from warden.settings import Settings

    with pytest.raises(ValidationError, match="public_url"):
        Settings(public_url=url)


@pytest.mark.parametrize("decide", ["approve", "deny"])
def test_a_cached_pending_answer_never_outlives_its_task(
    make_runtime: Callable[..., Runtime], decide: str
) -> None:
    """A resubmitted ask is answered from the desk's memory once its task was read (issue
    16: no read transaction); the append checks the task unchanged in its own
    transaction, so a task decided elsewhere (here: another replica on the same
    database) is answered at once, never with the stale "pending"."""
    rt = make_runtime(DESK)
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    # The resubmission reads the task and remembers it; the next is answered from memory.
    for _ in range(2):
        assert ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"] == tid
    other = Runtime.start(rt.settings)  # a second replica: its own desk and memory
    try:
        who = approver(other, "alice", "operators")
        if decide == "approve":
            other.desk.approve(tid, who, "fine")
        else:
            other.desk.deny(tid, who, "no")
    finally:
        other.close()
    answer = ask(agent, "delete_file", {"path": "/srv/a"})
    assert answer["decision"] == ("allow" if decide == "approve" else "deny"), answer
    assert answer["policy_data"]["approval"]["task_id"] == tid
    task = rt.desk.get(tid)
    assert task is not None
    assert task.state is (ApprovalState.CONSUMED if decide == "approve" else ApprovalState.DENIED)
    # The chain recorded exactly what was answered: every chain verifies (it raises):
    # the agent's session, the desk's and the agent registration's.
    assert verify_records(rt.store.iter_records(), ikm=TEST_IKM).sessions == 3
