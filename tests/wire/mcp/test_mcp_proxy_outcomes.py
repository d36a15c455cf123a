"""Modify, hidden tools and fail-closed outcomes of the MCP gateway.

The modify and hide cases run the proxy in front of the real ``mcp-server-time``;
the fail-closed cases drive :class:`warden.wire.mcp.gateway.Gateway` directly.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import TEST_IKM, agent_credential
from mcp_helpers import proxied, text, verify, warden_meta

from warden.runtime import Runtime
from warden.wire.mcp.gateway import Gateway
from warden.wire.mcp.outcome import (
    UnsupportedModification,
    modify_message,
    refused_tool_result,
)

TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]

TIME_BUNDLE = """\
warden_bundle: 1
id: mcp-time-test
version: "1"
default: deny
rules:
  - id: plumbing
    hooks: ["protocols/MCP/initialize", "protocols/MCP/*/list", "protocols/MCP/notifications/*"]
    effect: allow
  - id: results
    hooks: [protocols/MCP/tools/call]
    when: mcp.kind == "response"
    effect: allow
  - id: end
    hooks: [steps/sessionEnd, steps/toolCallResult]
    effect: allow
  - id: utc-only
    tools: [get_current_time]
    effect: modify
    reasoning: This agent reads the time in UTC only.
    reason_codes: [timezone_forced]
    modify:
      parameter_overrides: {timezone: UTC}
  - id: no-conversions
    tools: [convert_time]
    effect: deny
    reasoning: Conversions are not for this agent.
    reason_codes: [conversion_blocked]
"""


def test_modify_forwards_the_changed_arguments_and_hidden_tools_are_refused(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "time.yaml"
    policy.write_text(TIME_BUNDLE)
    data = tmp_path / "warden"

    async def run() -> None:
        with anyio.fail_after(60):
            async with proxied(data, policy, TIME_SERVER, "--hide-denied") as mcp:
                listed = await mcp.list_tools()
                assert [t.name for t in listed.tools] == ["get_current_time"]
                result = await mcp.call_tool("get_current_time", {"timezone": "Europe/Paris"})
                assert not result.is_error, text(result)
                real = result.structured_content
                assert isinstance(real, dict) and real["timezone"] == "UTC"
                meta = warden_meta(result)
                assert meta["decision"] == "modify"
                assert meta["modified"] == {"parameter_overrides": {"timezone": "UTC"}}
                assert meta["reason_codes"] == ["timezone_forced"]
                hidden = await mcp.call_tool(
                    "convert_time",
                    {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"},
                )
                assert hidden.is_error
                assert "no-conversions" in text(hidden) and "conversion_blocked" in text(hidden)

    anyio.run(run)
    done = verify(data)
    assert done.returncode == 0, done.stdout + done.stderr


def call_message(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def test_a_gateway_that_cannot_reach_warden_denies() -> None:
    def broken(_body: bytes) -> dict[str, Any]:
        raise ConnectionError("store gone")

    ruling = Gateway(broken, TEST_IKM, agent_id="a", key_id="agk_0000000000000000").check(
        call_message("write_file", {})
    )
    assert ruling.decision == "deny" and not ruling.forwards
    assert ruling.reason_codes == ["gateway_error"]


def test_an_unsigned_or_refused_answer_denies(runtime: Runtime) -> None:
    # No handshake: Warden answers a protocol error (-32003), which is no verdict.
    gateway = Gateway.for_agent(runtime.acs.handle, agent_credential(runtime, "a"))
    ruling = gateway.check(call_message("get_current_time", {}))
    assert ruling.decision == "deny" and not ruling.forwards

    def unsigned(_body: bytes) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": "x", "result": {"decision": "allow"}}

    forged = Gateway.for_agent(unsigned, agent_credential(runtime, "a")).check(
        call_message("x", {})
    )
    assert forged.decision == "deny" and forged.reason_codes == ["gateway_error"]


def test_only_the_in_process_gateway_skips_checking_answer_signatures(runtime: Runtime) -> None:
    # Decision 850: the proxy's own in-process service is not re-verified; any other
    # transport's answer with a bad signature is refused (IntegrityError → deny).
    credential = agent_credential(runtime, "a")

    def tampering(body: bytes) -> dict[str, Any]:
        answer = runtime.acs.handle(body)
        result = answer.get("result")
        if isinstance(result, dict) and "decision" in result and "signature" in result:
            result["reasoning"] = "changed after signing"
        return answer

    remote = Gateway.for_agent(tampering, credential)
    remote.open()
    refused = remote.check(call_message("read_file", {"path": "/tmp/x"}))
    assert refused.decision == "deny" and refused.reason_codes == ["gateway_error"]
    local = Gateway.for_agent(runtime.acs.handle, credential, in_process=True)
    assert local.client.in_process and not remote.client.in_process
    local.open()
    allowed = local.check(call_message("read_file", {"path": "/tmp/x"}))
    assert allowed.decision == "allow" and allowed.result.get("chain_hash")

    def unsigned(_body: bytes) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": "x", "result": {"decision": "allow"}}

    # In process too, an answer without a signature is no verdict.
    forged = Gateway.for_agent(unsigned, credential, in_process=True).check(call_message("x", {}))
    assert forged.decision == "deny" and forged.reason_codes == ["gateway_error"]


def test_the_default_bundle_decides_mcp_calls_through_the_acs_path(runtime: Runtime) -> None:
    gateway = Gateway.for_agent(runtime.acs.handle, agent_credential(runtime, "a"))
    gateway.open()
    allowed = gateway.check(call_message("read_file", {"path": "/tmp/x"}))
    assert allowed.decision == "allow" and allowed.rule_ids == ["tool-calls"]
    denied = gateway.check(call_message("Bash", {"command": "rm -rf /"}))
    assert denied.decision == "deny" and "destructive-shell" in denied.rule_ids
    asked = gateway.check(call_message("delete_file", {"path": "/tmp/x"}))
    assert asked.decision == "ask" and asked.task[0] is not None
    gateway.close()


ASK_BUNDLE = """\
warden_bundle: 1
id: ask-no-stop
version: "1"
default: deny
rules:
  - id: ask-delete
    hooks: [protocols/MCP/tools/call]
    tools: ["*delete*"]
    effect: ask
    reasoning: deleting needs a human
    ask:
      question: Delete it?
      approver: {type: human, id: operators}
      timeout_seconds: 900
      timeout_disposition: deny
  - id: the-rest
    hooks: ["protocols/MCP/*", steps/sessionEnd, steps/toolCallResult]
    effect: allow
"""


def test_an_asks_reasoning_and_the_desks_text_read_as_two_sentences(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    # Decision 904: a bundle's reasoning without a full stop ran into the desk's text
    # ("needs a human Awaiting approval").
    policy = tmp_path / "ask.yaml"
    policy.write_text(ASK_BUNDLE)
    runtime = make_runtime(policy)
    gateway = Gateway.for_agent(runtime.acs.handle, agent_credential(runtime, "a"))
    gateway.open()
    asked = gateway.check(call_message("delete_file", {"path": "/tmp/x"}))
    assert asked.decision == "ask"
    assert asked.reasoning.startswith("deleting needs a human. Awaiting approval: task ")
    said = refused_tool_result(asked, "delete_file")["content"][0]["text"]
    assert "deleting needs a human. Awaiting approval: task " in said
    gateway.close()


def test_modifications_apply_to_the_mcp_message() -> None:
    message = call_message("t", {"keep": 1, "token": "s3cret", "limit": 500})
    out = modify_message(
        message,
        {
            "parameter_overrides": {"limit": 10},
            "redactions": [
                {"path": "/params/arguments/token"},
                {"path": "/params/arguments/absent", "replacement": "-"},
            ],
        },
    )
    assert out["params"]["arguments"] == {"keep": 1, "token": "[REDACTED]", "limit": 10}
    assert message["params"]["arguments"]["token"] == "s3cret"  # the original is untouched
    response = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "k"}]}}
    redacted = modify_message(
        response, {"redactions": [{"path": "/result/content/0/text", "replacement": "***"}]}
    )
    assert redacted["result"]["content"][0]["text"] == "***"
    with pytest.raises(UnsupportedModification):
        modify_message(message, {"modified_content": "x"})
