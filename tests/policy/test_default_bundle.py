"""The shipped default bundle (examples/policies/default.yaml) against the bypasses a
hostile review found: option spellings, argv lists, nested arguments, tool-name case."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from conftest import DEFAULT_POLICY

from warden.core.types import ActionRequest, Effect
from warden.policy import PolicyEngine, load_bundle
from warden.wire.acs.methods import route
from warden.wire.acs.parse import action_request

ENGINE = PolicyEngine(load_bundle(DEFAULT_POLICY))

DESTRUCTIVE = [
    "rm -rf /",
    "rm -Rf /",
    "rm -fr /",
    "rm -r -f /",
    "rm -f -r /",
    "rm --recursive --force /",
    "rm --force -R /",
    "rm -r --force /",
    "sudo rm -rvf --no-preserve-root /",
    "/bin/rm -rf /home",
    "ls; rm -rf /",
    "rm\t-rf\t/",
    "find / -delete",
    "find . -name '*.log' -delete",
    "mkfs.ext4 /dev/sda1",
    "mkfs -t ext4 /dev/sda",
    "dd if=/dev/zero of=/dev/sda bs=1M",
    "dd of=/dev/sda if=/dev/zero",
    "chmod -R 777 /",
]
BENIGN = [
    "ls -la /",
    "rm notes.txt",
    "rm -f notes.txt",
    "rm -r build",
    "git rm --cached x",
    "echo confirm -r -f",
    "find . -name '*.log'",
    "dd if=a.img of=b.img",
    "chmod -R 755 /srv",
    "rm -i x; ls -f",
]


def _params(method: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "acs_version": "0.1.0",
        "request_id": str(uuid.uuid4()),
        "timestamp": "2026-11-29T12:00:00Z",
        "metadata": {"agent_id": "agent-a", "session_id": str(uuid.uuid4())},
        "payload": payload,
    }


def acs_call(tool: str, args: dict[str, Any], **extra: Any) -> ActionRequest:
    payload = {"tool": {"name": tool}, "arguments": {k: {"value": v} for k, v in args.items()}}
    method = "steps/toolCallRequest"
    return action_request(route(method), _params(method, {**payload, **extra}), None)


def mcp_call(tool: str, args: dict[str, Any]) -> ActionRequest:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": args},
    }
    method = "protocols/MCP/tools/call"
    return action_request(route(method), _params(method, message), None)


def shapes(command: str) -> dict[str, ActionRequest]:
    """One command in every shape an agent can send it."""
    argv = command.split()
    return {
        "acs-string": acs_call("shell", {"cmd": command}),
        "acs-argv": acs_call("exec", {"argv": argv}),
        "acs-nested": acs_call("run", {"spec": {"steps": [{"command": command}]}}),
        "acs-nested-argv": acs_call("run", {"spec": {"process": {"args": argv}}}),
        "acs-raw_command": acs_call("shell", {}, raw_command=command),
        "mcp-string": mcp_call("shell", {"cmd": command}),
        "mcp-argv": mcp_call("exec", {"argv": argv}),
        "mcp-nested": mcp_call("run", {"options": {"command": command}}),
    }


@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_destructive_command_denied_in_every_shape(command: str) -> None:
    for shape, request in shapes(command).items():
        ev = ENGINE.evaluate(request)
        assert ev.effect is Effect.DENY, (shape, command)
        assert ev.reason_codes == ("destructive_shell_command_blocked",), (shape, command)


@pytest.mark.parametrize("command", BENIGN)
def test_benign_command_allowed_in_every_shape(command: str) -> None:
    for shape, request in shapes(command).items():
        ev = ENGINE.evaluate(request)
        assert ev.effect is Effect.ALLOW, (shape, command, ev.reason_codes)


def test_command_as_an_argv_list_exactly_as_reported() -> None:
    ev = ENGINE.evaluate(acs_call("exec", {"command": ["rm", "-rf", "/"]}))
    assert ev.effect is Effect.DENY
    ev = ENGINE.evaluate(mcp_call("exec", {"command": ["rm", "-rf", "/"]}))
    assert ev.effect is Effect.DENY


@pytest.mark.parametrize(
    ("tool", "code"),
    [
        ("delete_file", "destructive_action_requires_approval"),
        ("deleteFile", "destructive_action_requires_approval"),
        ("DeleteFile", "destructive_action_requires_approval"),
        ("RemoveUser", "destructive_action_requires_approval"),
        ("DropTable", "destructive_action_requires_approval"),
        ("PurgeQueue", "destructive_action_requires_approval"),
        ("send_money", "payment_requires_approval"),
        ("SendMoney", "payment_requires_approval"),
        ("sendMoney", "payment_requires_approval"),
        ("TransferFunds", "payment_requires_approval"),
        ("CreatePayment", "payment_requires_approval"),
        ("payInvoice", "payment_requires_approval"),
        ("IssueRefund", "payment_requires_approval"),
    ],
)
def test_tool_name_case_variants_ask(tool: str, code: str) -> None:
    for request in (acs_call(tool, {}), mcp_call(tool, {})):
        ev = ENGINE.evaluate(request)
        assert ev.effect is Effect.ASK, tool
        assert ev.reason_codes == (code,)


@pytest.mark.parametrize("tool", ["read_file", "ReadFile", "list_dir", "search", "displayName"])
def test_ordinary_tools_allowed(tool: str) -> None:
    assert ENGINE.evaluate(acs_call(tool, {"path": "/tmp/x"})).effect is Effect.ALLOW
