"""ACS request params → :class:`~warden.core.types.ActionRequest` (parse only, no policy)."""

from __future__ import annotations

from typing import Any

from warden.core.types import NO_AGENT, NO_MCP, ActionRequest
from warden.store.base import SessionState
from warden.wire.acs.mcp import message_kind, tool_facts
from warden.wire.acs.methods import MethodInfo

_EMPTY_TOOL = {"name": "", "version": "", "provider": "", "operation": "", "capability": ""}


def action_request(
    info: MethodInfo,
    params: dict[str, Any],
    session: SessionState | None,
    *,
    agent: dict[str, Any] | None = None,
    claims: dict[str, Any] | None = None,
) -> ActionRequest:
    """Build the domain request for a schema-valid step.

    Tool arguments arrive as ``{"value": v, "provenance"?: …}``; rules see ``v``. A
    wrapped MCP message must have passed :func:`~warden.wire.acs.mcp.check_wrapped`.
    """
    payload = params["payload"]
    tool: dict[str, str] = dict(_EMPTY_TOOL)
    args: dict[str, Any] = {}
    mcp = dict(NO_MCP)
    if info.kind == "mcp":
        assert info.mcp_method is not None
        tool, args = tool_facts(payload, info.mcp_method)
        mcp = {"kind": message_kind(payload), "method": info.mcp_method}
    elif isinstance(payload.get("tool"), dict):
        t = payload["tool"]
        tool = {k: str(t.get(k, "")) for k in ("name", "version", "provider")}
        tool["operation"] = str(payload.get("operation", ""))
        tool["capability"] = str(payload.get("capability", ""))
        if info.method == "steps/toolCallRequest":
            args = {k: v.get("value") for k, v in payload["arguments"].items()}
    metadata = params["metadata"]
    return ActionRequest(
        method=info.method,
        payload=payload,
        metadata=metadata,
        tool=tool,
        args=args,
        raw_command=str(payload.get("raw_command", "")),
        session={
            "id": metadata.get("session_id", ""),
            "agent_id": session.agent_id if session else metadata.get("agent_id", ""),
            "step_count": session.head_seq + 1 if session else 0,
        },
        permitted=info.permitted,
        mcp=mcp,
        agent=agent if agent is not None else dict(NO_AGENT),
        claims=claims if claims is not None else {"user_id": ""},
    )
