"""Issue 14 item 2: a wrapped MCP request cannot pose as a response.

A JSON-RPC message is a request, a notification or a response. One carrying ``method``
(or ``params``) beside ``result`` or ``error`` is malformed: refused with -32602 and
nothing recorded, on both store backends. Rules tell the kinds apart by ``mcp.kind``,
which Warden computes; the shipped MCP bundle allows genuine responses only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import ROOT, agent_credential, assert_valid_response, service_client

from warden.core.types import ActionRequest
from warden.policy import PolicyEngine, load_bundle
from warden.runtime import Runtime
from warden.wire.acs.methods import route
from warden.wire.acs.parse import action_request
from warden.wire.mcp.gateway import Gateway

MCP_POLICY = ROOT / "examples" / "policies" / "mcp.yaml"
TOOLS_CALL = "protocols/MCP/tools/call"


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    """Refusals must record nothing on SQLite and on PostgreSQL alike."""
    return make_backend_runtime


def request(name: str, **stray: Any) -> dict[str, Any]:
    """An MCP ``tools/call`` request, plus any ``stray`` members."""
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"path": "/srv/agent-workspace/a"}},
    }
    return {**message, **stray}


RESPONSE = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "ok"}]}}

#: (message, the member the -32602 pointer names)
DISGUISED = [
    # A tool the bundle names nowhere: the default denies it, the disguise made it allow.
    pytest.param(request("run_anything", result={}), "result", id="unnamed+result"),
    pytest.param(request("delete_everything", result={}), "result", id="request+result"),
    pytest.param(
        request("delete_everything", error={"code": 1, "message": "x"}), "error", id="request+error"
    ),
    pytest.param(
        request("delete_everything", result={"content": []}, error={"code": 1, "message": "x"}),
        "result",
        id="request+both",
    ),
    pytest.param({**RESPONSE, "params": {"name": "delete_everything"}}, "result", id="resp+params"),
]


def records(rt: Runtime, session_id: str) -> list[dict[str, Any]]:
    return list(rt.store.iter_records(session_id))


def entries(rt: Runtime, session_id: str) -> list[dict[str, Any]]:
    return [r for r in records(rt, session_id) if r["kind"] == "entry"]


@pytest.mark.parametrize(("message", "member"), DISGUISED)
def test_a_message_of_two_kinds_is_refused_and_records_nothing(
    make_runtime: Callable[..., Runtime], message: dict[str, Any], member: str
) -> None:
    rt = make_runtime(policy=MCP_POLICY)
    client = service_client(rt)
    client.hello()
    before = records(rt, client.session_id)
    answer = client.call(TOOLS_CALL, message)
    assert_valid_response(answer)
    assert "result" not in answer
    error = answer["error"]
    assert error["code"] == -32602
    assert error["data"]["pointer"] == f"/params/payload/{member}"
    assert "request or a response, not both" in error["message"]
    assert records(rt, client.session_id) == before
    # The session goes on: the genuine request and response are decided and chained.
    asked = client.call(TOOLS_CALL, request("git_commit"))["result"]
    assert asked["decision"] == "ask"
    passed = client.call(TOOLS_CALL, RESPONSE)["result"]
    assert passed["decision"] == "allow"
    assert [r["rule_id"] for r in passed["policy_references"]] == ["mcp-results"]
    assert len(entries(rt, client.session_id)) == 2


def test_the_gateway_denies_a_disguised_request(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(policy=MCP_POLICY)
    gateway = Gateway.for_agent(rt.acs.handle, agent_credential(rt, "a"))
    gateway.open()
    ruling = gateway.check(request("git_commit", result={}))
    assert ruling.decision == "deny" and not ruling.forwards
    assert ruling.reason_codes == ["invalid_params"]
    genuine = gateway.check(request("git_commit"))
    assert genuine.decision == "ask" and genuine.rule_ids == ["git-change-needs-approval"]
    gateway.close()


def _wrapped(message: dict[str, Any], method: str = TOOLS_CALL) -> ActionRequest:
    params = {
        "acs_version": "0.1.0",
        "request_id": "0b7c6c1e-3f0a-4c53-9a39-6f1f1f0c0a06",
        "timestamp": "2026-11-29T12:00:00Z",
        "metadata": {"agent_id": "a", "session_id": "s"},
        "payload": message,
    }
    return action_request(route(method), params, None)


def test_rules_see_the_kind_warden_computed() -> None:
    assert _wrapped(request("read_file")).mcp == {"kind": "request", "method": "tools/call"}
    assert _wrapped(RESPONSE).mcp == {"kind": "response", "method": "tools/call"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    wrapped = _wrapped(note, "protocols/MCP/notifications/initialized")
    assert wrapped.mcp == {"kind": "notification", "method": "notifications/initialized"}
    step = _wrapped({"tool": {"name": "x"}, "arguments": {}}, "steps/toolCallRequest")
    assert step.mcp == {"kind": "", "method": ""}


def test_the_shipped_mcp_bundle_allows_responses_only() -> None:
    engine = PolicyEngine(load_bundle(MCP_POLICY))
    response = engine.evaluate(_wrapped(RESPONSE))
    assert response.effect.value == "allow"
    assert [r.id for r in response.fired] == ["mcp-results"]
    # A request the bundle names nowhere is not a response: the default denies it.
    unknown = engine.evaluate(_wrapped(request("exfiltrate")))
    assert (unknown.effect.value, unknown.reason_codes) == ("deny", ("no_rule_matched",))
    assert "mcp-results" not in [r.id for r in engine.evaluate(_wrapped(request("x"))).fired]
