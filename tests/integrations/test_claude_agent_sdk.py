"""The Claude Agent SDK adapter end to end: the SDK's ``query()`` drives the real
Claude Code CLI (the one its wheel bundles) against a scripted Claude on loopback
(tests/integrations/scripted_claude.py; no network, no API key). The CLI really calls
the adapter's ``PreToolUse``/``PostToolUse`` hooks and ``can_use_tool`` and really runs
the tools it allows. Warden (in process, bundle tests/assets/integrations/claude.yaml)
denies one call, modifies one, asks on one and allows the rest; the audit chain shows
each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_credential, asset

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (  # noqa: E402
    AssistantMessage,
    ResultMessage,
    ToolResultBlock,
    UserMessage,
    query,
)
from scripted_claude import BUNDLED_CLI, Script, offline_env, scripted_claude  # noqa: E402

import warden  # noqa: E402
from warden.approvals.tasks import ApprovalState  # noqa: E402
from warden.identity.api_keys import Role  # noqa: E402
from warden.integrations.claude_agent_sdk import WardenGuard  # noqa: E402
from warden.runtime import Runtime  # noqa: E402

BUNDLE = asset("integrations/claude.yaml")


async def one_prompt(text: str) -> AsyncIterator[dict[str, Any]]:
    yield {"type": "user", "message": {"role": "user", "content": text},
           "parent_tool_use_id": None, "session_id": "default"}  # fmt: skip


def entries(rt: Runtime, session_id: str) -> list[tuple[str, str, str]]:
    out = []
    for r in rt.store.iter_records(session_id):
        if r["kind"] == "entry":
            e = r["entry"]
            rules = [p["rule_id"] for p in e["verdict"].get("policy_references", [])]
            out.append((e["step_type"], e["verdict"]["decision"], rules[-1] if rules else ""))
    return out


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(BUNDLE)


@pytest.mark.skipif(not BUNDLED_CLI.exists(), reason="the SDK wheel ships no CLI here")
def test_the_sdk_runs_tools_only_as_warden_decides(rt: Runtime, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "build").mkdir()
    notes = work / "notes.txt"
    agent_credential(rt, "sdk-agent")
    approver, _ = rt.api_keys.create("alice", Role.APPROVER, ["operators"])

    def approve_pending(turn: int) -> None:
        # The human on the desk approves the write between the model's two attempts.
        if turn == 4:
            for task in rt.desk.list():
                if task.state is ApprovalState.PENDING:
                    rt.desk.approve(task.id, approver, "fine")

    script = Script(
        tool_uses=[
            ("Bash", {"command": f"rm -rf {work / 'build'}", "description": "wipe"}),
            ("Bash", {"command": "echo hello", "description": "greet"}),
            ("Bash", {"command": "echo secret-token-123", "description": "show"}),
            ("Write", {"file_path": str(notes), "content": "governed\n"}),
            ("Write", {"file_path": str(notes), "content": "governed\n"}),
        ],
        before_turn=approve_pending,
    )
    client = warden.AsyncClient.in_process(rt, agent_id="sdk-agent")
    asked: list[tuple[str, str]] = []

    class CountingGuard(WardenGuard):
        async def can_use_tool(
            self, tool_name: str, tool_input: dict[str, Any], context: Any
        ) -> Any:
            result = await super().can_use_tool(tool_name, tool_input, context)
            asked.append((tool_name, result.behavior))
            return result

    guard = CountingGuard(client)
    results: dict[str, ToolResultBlock] = {}
    outcome: list[ResultMessage] = []

    async def run() -> None:
        with scripted_claude(script) as base_url:
            options = guard.options(
                cli_path=str(BUNDLED_CLI),
                cwd=str(work),
                env=offline_env(base_url, tmp_path / "home"),
                setting_sources=[],
                model="claude-sonnet-4-5",
                max_turns=10,
            )
            async for message in query(prompt=one_prompt("tidy up"), options=options):
                if isinstance(message, UserMessage) and isinstance(message.content, list):
                    for block in message.content:
                        if isinstance(block, ToolResultBlock):
                            results[block.tool_use_id] = block
                if isinstance(message, ResultMessage):
                    outcome.append(message)
                assert not isinstance(message, AssistantMessage) or message.error is None

    asyncio.run(asyncio.wait_for(run(), timeout=120))

    assert outcome and not outcome[0].is_error
    # deny: the CLI never ran rm; the model was told why.
    assert (work / "build").is_dir()
    assert results["toolu_000"].is_error and "Recursive deletes" in str(
        results["toolu_000"].content
    )
    # allow: it ran.
    assert "hello" in str(results["toolu_001"].content)
    # modify: the CLI ran Warden's command, not the model's.
    assert "redacted-by-warden" in str(results["toolu_002"].content)
    assert "secret-token" not in str(results["toolu_002"].content)
    # ask: refused while pending, naming the task; allowed once approved.
    assert results["toolu_003"].is_error and "desk" in str(results["toolu_003"].content)
    assert notes.read_text() == "governed\n"

    # The CLI asked can_use_tool for the approved write (echo needs no permission); it
    # reused the hook's decision, so every call is one toolCallRequest.
    assert ("Write", "allow") in asked
    assert entries(rt, client.session_id) == [
        ("steps/toolCallRequest", "deny", "no-recursive-delete"),
        ("steps/toolCallRequest", "allow", "tools"),
        ("steps/toolCallResult", "allow", "lifecycle"),
        ("steps/toolCallRequest", "modify", "quiet-secrets"),
        ("steps/toolCallResult", "allow", "lifecycle"),
        ("steps/toolCallRequest", "ask", "writes-ask"),
        ("steps/toolCallRequest", "allow", "writes-ask"),
        ("steps/toolCallResult", "allow", "lifecycle"),
    ]


def test_can_use_tool_alone_decides_and_fails_closed(rt: Runtime) -> None:
    """Without the hooks, can_use_tool asks Warden itself (the SDK's public types)."""
    from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

    cred = agent_credential(rt, "sdk-agent")
    guard = WardenGuard(warden.AsyncClient.in_process(rt, credential=cred))

    async def ask(name: str, args: dict[str, Any], tid: str) -> Any:
        return await guard.can_use_tool(name, args, ToolPermissionContext(tool_use_id=tid))

    denied = asyncio.run(ask("Bash", {"command": "rm -rf /"}, "t1"))
    assert isinstance(denied, PermissionResultDeny) and "Recursive" in denied.message
    modified = asyncio.run(ask("Bash", {"command": "echo secret"}, "t2"))
    assert isinstance(modified, PermissionResultAllow)
    assert modified.updated_input == {"command": "echo redacted-by-warden"}
    pending = asyncio.run(ask("Write", {"file_path": "/x", "content": ""}, "t3"))
    assert isinstance(pending, PermissionResultDeny) and "desk" in pending.message
    allowed = asyncio.run(ask("Read", {"file_path": "/x"}, "t4"))
    assert isinstance(allowed, PermissionResultAllow) and allowed.updated_input == {
        "file_path": "/x"
    }

    async def unreachable(body: bytes) -> Any:
        raise warden.WardenUnavailable("connection refused")

    down = WardenGuard(warden.AsyncClient(unreachable, cred))
    refused = asyncio.run(
        down.can_use_tool("Read", {"file_path": "/x"}, ToolPermissionContext(tool_use_id="t5"))
    )
    assert isinstance(refused, PermissionResultDeny) and "could not decide" in refused.message
    hook = asyncio.run(down.pre_tool_use(
        {"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {},  # type: ignore[typeddict-item]
         "tool_use_id": "t6", "session_id": "s", "transcript_path": "", "cwd": ""}, "t6",
        {"signal": None}))  # fmt: skip
    assert hook["hookSpecificOutput"]["permissionDecision"] == "deny"  # type: ignore[typeddict-item]
