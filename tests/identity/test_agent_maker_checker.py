"""Maker-checker rests on verified identity (issue 15 item 4), on both store backends: the
owner of the agent that raised an ask cannot approve it whatever ``user_id`` the agent
claims; a claimed ``user_id`` neither excludes an approver nor grants read access; CEL
rules see ``agent.*`` as verified facts and ``claims.user_id`` as a claim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import asset
from fastapi.testclient import TestClient

from warden.approvals.desk import NotPermitted
from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Identity, Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.wire.acs.client import AcsClient

DESK = asset("approvals/desk.yaml")


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime(DESK)
    assert runtime.agents is not None
    runtime.agents.add("bot-a", "alice")
    runtime.agents.add("mallory", "mallory.owner")
    return runtime


def _approver(rt: Runtime, name: str) -> Identity:
    return rt.api_keys.create(name, Role.APPROVER, ["operators"])[0]


def _ask(rt: Runtime, claimed: str) -> str:
    assert rt.agents is not None
    key = rt.agents.keys("bot-a")[0].key_id
    client = AcsClient.for_agent(rt.acs.handle, rt.agents.credential(key))
    client.hello()
    r = client.tool_call(
        "delete_file", {"path": "/srv/x"}, metadata={"user_context": {"user_id": claimed}}
    )["result"]
    assert r["decision"] == "ask", r
    return str(r["ask_details"]["task_id"])


@pytest.mark.parametrize("claimed", ["someone-else", "alice", "carol"])
def test_the_owner_cannot_approve_whatever_the_agent_claims(rt: Runtime, claimed: str) -> None:
    tid = _ask(rt, claimed)
    with pytest.raises(NotPermitted, match="maker-checker"):
        rt.desk.approve(tid, _approver(rt, "alice"), "mine")
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.PENDING
    assert task.requester.names() == {"bot-a", "alice"}
    assert task.requester.claimed_user_id == claimed


def test_a_claimed_user_id_excludes_no_approver(rt: Runtime) -> None:
    # The agent claims to act for carol: that is a claim, so carol may still approve.
    tid = _ask(rt, "carol")
    task = rt.desk.approve(tid, _approver(rt, "carol"), "checked")
    assert task.state is ApprovalState.APPROVED


def test_a_claimed_user_id_grants_no_read_access(rt: Runtime) -> None:
    # bot-a claims to act for "mallory", a registered agent with its own key.
    tid = _ask(rt, "mallory")
    _, mallory = rt.api_keys.create("mallory", Role.AGENT)
    _, bot = rt.api_keys.create("bot-a", Role.AGENT)
    with TestClient(create_app(rt)) as http:

        def show(token: str, task_id: str) -> Any:
            return http.get(
                f"/v1/approvals/{task_id}", headers={"authorization": f"Bearer {token}"}
            )

        theirs, missing = show(mallory, tid), show(mallory, "tsk_nope")
        assert theirs.status_code == missing.status_code == 404
        assert show(bot, tid).status_code == 200  # the requesting agent reads its own


def test_rules_read_verified_agent_facts_and_claims(
    make_runtime: Callable[..., Runtime], tmp_path: Any
) -> None:
    bundle = tmp_path / "identity.yaml"
    bundle.write_text(
        """warden_bundle: 1
id: identity-facts
version: "1"
default: deny
rules:
  - id: lifecycle
    hooks: [steps/sessionStart]
    effect: allow
  - id: ops-agents-only
    tools: [deploy]
    when: '"ops" in agent.groups && agent.owner == "alice" && agent.id == "bot-a"'
    effect: allow
  - id: claims-are-claims
    tools: [deploy]
    when: 'claims.user_id == "root"'
    effect: deny
    reasoning: A claim may tighten, never widen.
"""
    )
    rt = make_runtime(bundle)
    assert rt.agents is not None
    _, ops = rt.agents.add("bot-a", "alice", groups=["ops"])
    _, other = rt.agents.add("bot-b", "alice")
    a = AcsClient.for_agent(rt.acs.handle, ops)
    a.hello()
    assert a.tool_call("deploy", {})["result"]["decision"] == "allow"
    root = {"user_context": {"user_id": "root"}}
    assert a.tool_call("deploy", {}, metadata=root)["result"]["decision"] == "deny"
    b = AcsClient.for_agent(rt.acs.handle, other)
    b.hello()
    assert b.tool_call("deploy", {})["result"]["decision"] == "deny"
