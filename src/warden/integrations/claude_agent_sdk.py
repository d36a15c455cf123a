"""Warden for the Claude Agent SDK (``pip install 'warden[claude-agent-sdk]'``).

The SDK drives the Claude Code CLI; two of its callbacks reach Warden:

- **hooks** (``PreToolUse``/``PostToolUse`` :class:`~claude_agent_sdk.HookMatcher`
  callbacks) fire for *every* tool call, which is what ACS's completeness rule asks
  (specs/acs.md §7): ``PreToolUse`` → ``steps/toolCallRequest``, ``PostToolUse`` →
  ``steps/toolCallResult``;
- **can_use_tool** fires only when the CLI's own permission rules would prompt.

:class:`WardenGuard` offers both and sends one ``steps/toolCallRequest`` per tool call:
the decision its ``PreToolUse`` hook got is reused by ``can_use_tool`` for the same
``tool_use_id``. Without the hooks, ``can_use_tool`` asks Warden itself.

Mapping (decision 305): deny → ``PermissionResultDeny`` / ``permissionDecision: deny``
with Warden's reasoning; modify → allow with ``updated_input`` (the redacted or
overridden arguments); ask/defer → wait for the desk up to ``approval_timeout``
seconds, then deny naming the task (0: deny at once; the model may retry the identical
call after approval); allow → ``PermissionResultAllow`` (the hook leaves the decision to
the CLI's permission flow). Any Warden failure denies (fail closed).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Any, cast

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookInput,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)
from claude_agent_sdk.types import SyncHookJSONOutput

from warden.client.aio import AsyncClient
from warden.client.decision import Decision
from warden.client.session import SESSION_NAMESPACE
from warden.errors import WardenError
from warden.integrations.claude_code import reason_text

PROVIDER = "claude-agent-sdk"
#: Decisions remembered for can_use_tool, by tool_use_id.
REMEMBERED = 512


class WardenGuard:
    """Warden's callbacks for one SDK session, over an :class:`AsyncClient`.

    ``approval_timeout``/``poll`` are seconds (see the module doc). Use
    :meth:`options` (or :attr:`can_use_tool` and :meth:`hooks` on options you build)::

        guard = WardenGuard(warden.AsyncClient.from_env())
        async for message in query(prompt=prompts(), options=guard.options()):
            ...
    """

    def __init__(
        self, client: AsyncClient, *, approval_timeout: float = 0.0, poll: float = 2.0
    ) -> None:
        self.client = client
        self.approval_timeout = approval_timeout
        self.poll = poll
        self._decided: OrderedDict[str, Decision] = OrderedDict()

    # -- the SDK's callbacks ---------------------------------------------------------

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        """The SDK's ``can_use_tool``: Warden's decision as a PermissionResult."""
        decision = self._decided.get(context.tool_use_id or "")
        if decision is None:
            try:
                decision = await self._decide(tool_name, tool_input, context.tool_use_id)
            except WardenError as exc:
                return PermissionResultDeny(message=_unavailable(exc))
        if not decision.allowed:
            return PermissionResultDeny(message=_refusal(decision))
        return PermissionResultAllow(updated_input=decision.args_for(tool_input))

    async def pre_tool_use(
        self, hook_input: HookInput, tool_use_id: str | None, context: HookContext
    ) -> SyncHookJSONOutput:
        """``PreToolUse`` hook callback → ``steps/toolCallRequest``."""
        data: dict[str, Any] = dict(hook_input)
        tool_input = dict(data.get("tool_input") or {})
        try:
            decision = await self._decide(str(data.get("tool_name", "")), tool_input, tool_use_id)
        except WardenError as exc:
            return _pre("deny", _unavailable(exc))
        if not decision.allowed:
            return _pre("deny", _refusal(decision))
        if decision.decision == "modify":
            return _pre("allow", reason_text(decision), decision.args_for(tool_input))
        return {}  # allowed: the CLI's permission flow (and can_use_tool) goes on

    async def post_tool_use(
        self, hook_input: HookInput, tool_use_id: str | None, context: HookContext
    ) -> SyncHookJSONOutput:
        """``PostToolUse`` hook callback → ``steps/toolCallResult``; a deny or modify
        withholds the output from the model (``decision: block``)."""
        data: dict[str, Any] = dict(hook_input)
        rid = self._request_id(tool_use_id)
        try:
            decision = await self.client.tool_call_result(
                rid or "",
                data.get("tool_response"),
                tool_name=str(data.get("tool_name", "")),
                duration_ms=data.get("duration_ms"),
            )
        except WardenError as exc:
            return {"decision": "block", "reason": _unavailable(exc)}
        if decision.decision == "allow":
            return {}
        return {
            "decision": "block",
            "reason": reason_text(decision) + " The tool's output is withheld by policy.",
        }

    def hooks(self) -> dict[Any, list[HookMatcher]]:
        """``ClaudeAgentOptions.hooks`` for every tool; the hook timeout covers the
        approval wait."""
        timeout = max(60.0, self.approval_timeout + 30.0)
        return {
            "PreToolUse": [HookMatcher(hooks=[self.pre_tool_use], timeout=timeout)],
            "PostToolUse": [HookMatcher(hooks=[self.post_tool_use], timeout=timeout)],
        }

    def options(self, **kw: Any) -> ClaudeAgentOptions:
        """``ClaudeAgentOptions(**kw)`` with Warden's ``can_use_tool`` and hooks (other
        hooks given in ``kw["hooks"]`` are kept; Warden's run first)."""
        hooks: dict[Any, list[HookMatcher]] = {}
        for event, matchers in self.hooks().items():
            hooks[event] = [*matchers, *(kw.get("hooks") or {}).get(event, [])]
        for event, matchers in (kw.pop("hooks", None) or {}).items():
            hooks.setdefault(event, list(matchers))
        return ClaudeAgentOptions(can_use_tool=self.can_use_tool, hooks=hooks, **kw)

    # -- shared -----------------------------------------------------------------------

    async def _decide(
        self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> Decision:
        decision = await self.client.tool_call_request(
            tool_name,
            tool_input,
            provider=PROVIDER,
            raw_command=tool_input.get("command")
            if isinstance(tool_input.get("command"), str)
            else None,
            request_id=self._request_id(tool_use_id),
        )
        if decision.needs_approval and self.approval_timeout > 0:
            decision = await self.client.wait_for_approval(
                decision, timeout=self.approval_timeout, poll=self.poll
            )
        if tool_use_id:
            self._decided[tool_use_id] = decision
            while len(self._decided) > REMEMBERED:
                self._decided.popitem(last=False)
        return decision

    def _request_id(self, tool_use_id: str | None) -> str | None:
        """The request id of a tool use's first toolCallRequest (so its result can
        name it): a UUIDv5 of this client's session and ``tool_use_id``."""
        if not tool_use_id:
            return None
        return str(uuid.uuid5(SESSION_NAMESPACE, f"{self.client.session_id}:{tool_use_id}"))


def _pre(decision: str, reason: str, updated: dict[str, Any] | None = None) -> SyncHookJSONOutput:
    out: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }
    if updated is not None:
        out["updatedInput"] = updated
    return cast(SyncHookJSONOutput, {"hookSpecificOutput": out})


def _refusal(decision: Decision) -> str:
    text = reason_text(decision)
    if decision.needs_approval:
        text += " A human must approve this on Warden's desk; retry the identical call then."
    return text


def _unavailable(exc: WardenError) -> str:
    return f"Warden could not decide, so this is refused: {exc.message}"
