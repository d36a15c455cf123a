"""Render a ruling for the MCP client, and apply a MODIFY to an MCP message.

- deny → a tool error result (``isError: true``) whose text names the rules and
  reason codes; on ``resources/read`` and ``prompts/get``, which have no error
  result, an MCP error response with the same text.
- ask / defer → a tool error telling the agent the call awaits approval, with the
  task id and the desk URL: the identical call, resent after an approver approves,
  is allowed once (docs/decisions.md 52).
- modify → the request's ``modifications`` applied to the MCP message
  (``parameter_overrides`` and ``redactions``, ACS §6.3 with wrapped-MCP pointers
  such as ``/params/arguments/<name>``); the response's redactions apply to the
  result (pointers such as ``/result/content/0/text``).

Every result the client gets carries ``_meta.warden`` (decision, rules, reason
codes, ``policy_data``).
"""

from __future__ import annotations

import copy
from typing import Any

from warden.wire.mcp.gateway import Ruling

#: Replacement of a redaction that names none.
REDACTED = "[REDACTED]"

#: JSON-RPC error code of a refused ``resources/read`` / ``prompts/get`` (the MCP
#: "invalid request" range has no "forbidden"; -32001 is implementation-defined).
REFUSED_CODE = -32001


class UnsupportedModification(ValueError):
    """A MODIFY the gateway cannot apply to an MCP message (``modified_content``):
    the call is then denied rather than forwarded unmodified."""


def refusal_text(ruling: Ruling, what: str) -> str:
    """The sentence an agent reads when ``what`` (``tools/call write_file``) is not run."""
    rules = ", ".join(r for r in ruling.rule_ids if r) or "none (fail closed)"
    codes = ", ".join(ruling.reason_codes) or "none"
    why = f" {ruling.reasoning}" if ruling.reasoning else ""
    if ruling.decision in ("ask", "defer"):
        task_id, task_url = ruling.task
        where = f" task {task_id}" if task_id else " no task could be filed"
        desk = f", approval desk {task_url}" if task_url else ""
        return (
            f"Warden: {what} awaits human approval ({where.strip()}{desk}). Send the identical "
            f"call again after an approver approves it; it is then allowed once. "
            f"Rules: {rules}; reason codes: {codes}.{why}"
        )
    return f"Warden denied {what}. Rules: {rules}; reason codes: {codes}.{why}"


def refused_tool_result(ruling: Ruling, tool: str) -> dict[str, Any]:
    """A ``CallToolResult`` (wire JSON) for a call that was not forwarded."""
    return {
        "content": [{"type": "text", "text": refusal_text(ruling, f"tools/call {tool}")}],
        "isError": True,
        "_meta": {"warden": ruling.meta()},
    }


def withheld_tool_result(ruling: Ruling, tool: str) -> dict[str, Any]:
    """A ``CallToolResult`` replacing a real result the policy would not let through."""
    text = refusal_text(ruling, f"the result of tools/call {tool}")
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {"warden": ruling.meta()},
    }


def with_meta(result: dict[str, Any], warden: dict[str, Any]) -> dict[str, Any]:
    """``result`` with ``_meta.warden`` set (other ``_meta`` members kept)."""
    meta = dict(result.get("_meta") or {})
    meta["warden"] = warden
    return {**result, "_meta": meta}


def _segments(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise UnsupportedModification(f"{pointer!r} is not a JSON pointer")
    return [s.replace("~1", "/").replace("~0", "~") for s in pointer[1:].split("/")]


def _set(doc: Any, pointer: str, value: Any, *, create: bool) -> bool:
    """Set ``doc[pointer] = value``; True if set. Missing parents are created only
    for ``create`` (overrides); a redaction of an absent member changes nothing."""
    parts = _segments(pointer)
    node = doc
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return False
            if last:
                node[int(part)] = value
                return True
            node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                if part not in node and not create:
                    return False
                node[part] = value
                return True
            if part not in node:
                if not create:
                    return False
                node[part] = {}
            node = node[part]
        else:
            return False
    return False


def modify_message(message: dict[str, Any], mods: dict[str, Any]) -> dict[str, Any]:
    """A copy of the MCP ``message`` with ``mods`` applied.

    ``parameter_overrides`` set ``params.arguments.<name>``; ``redactions`` replace
    the member at ``path`` (a pointer into the message) with ``replacement`` or
    ``[REDACTED]``. Raises :class:`UnsupportedModification` for ``modified_content``.
    """
    if "modified_content" in mods:
        raise UnsupportedModification("modified_content cannot be applied to an MCP message")
    out = copy.deepcopy(message)
    for name, value in (mods.get("parameter_overrides") or {}).items():
        params = out.setdefault("params", {})
        arguments = params.get("arguments")
        if not isinstance(arguments, dict):
            arguments = params["arguments"] = {}
        arguments[str(name)] = copy.deepcopy(value)
    for red in mods.get("redactions") or []:
        replacement = red.get("replacement")
        _set(
            out,
            str(red.get("path", "")),
            REDACTED if replacement is None else replacement,
            create=False,
        )
    return out
