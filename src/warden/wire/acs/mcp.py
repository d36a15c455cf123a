"""Wrapped MCP messages (specs/acs.md §16): checks and the facts rules see.

``params.payload`` is the intact MCP JSON-RPC message: a request, a
notification, or a response wrapped under the method it answers. JSON-RPC 2.0
(§4, §5) makes every message exactly one of these; one that mixes the members of
two kinds (a ``method`` beside a ``result``) is malformed and refused, and rules
read the kind Warden computed (CEL ``mcp.kind``), never member presence.
"""

from __future__ import annotations

from typing import Any, Literal

from warden.errors import InvalidParams

#: What a wrapped MCP message is (JSON-RPC 2.0 §4, §5); CEL ``mcp.kind``.
MessageKind = Literal["request", "notification", "response"]

#: Members that only a request or notification carries, and only a response carries.
_CALL_MEMBERS = ("method", "params")
_RESPONSE_MEMBERS = ("result", "error")


def check_wrapped(message: Any, mcp_method: str, method: str) -> None:
    """Raise :class:`InvalidParams` (with a JSON pointer) for a malformed message."""

    def bad(pointer: str, msg: str) -> InvalidParams:
        return InvalidParams(f"wrapped MCP message: {msg}", pointer=pointer, method=method)

    if not isinstance(message, dict):
        raise bad("/params/payload", "must be an object")
    if message.get("jsonrpc") != "2.0":
        raise bad("/params/payload/jsonrpc", 'must be "2.0"')
    call = [m for m in _CALL_MEMBERS if m in message]
    answer = [m for m in _RESPONSE_MEMBERS if m in message]
    if call and answer:
        # Neither a request nor a response: refusing it keeps a request from posing as
        # a response that rules allow (issue 14).
        raise bad(
            f"/params/payload/{answer[0]}",
            f"a message is a request or a response, not both: it carries {call[0]!r} "
            f"and {answer[0]!r}",
        )
    if "method" in message:
        if message["method"] != mcp_method:
            raise bad("/params/payload/method", f"must equal {mcp_method!r}")
        is_notification = mcp_method.startswith("notifications/")
        if "id" in message or not is_notification:
            mid = message.get("id")
            if isinstance(mid, bool) or not isinstance(mid, str | int | float):
                raise bad("/params/payload/id", "must be a string or number")
        if "params" in message and not isinstance(message["params"], dict):
            raise bad("/params/payload/params", "must be an object")
        return
    mid = message.get("id")
    if isinstance(mid, bool) or not isinstance(mid, str | int | float):
        raise bad("/params/payload/id", "a response must carry a string or number id")
    has_result, has_error = "result" in message, "error" in message
    if has_result == has_error:
        raise bad("/params/payload", "a response carries exactly one of result and error")
    if has_result and not isinstance(message["result"], dict):
        raise bad("/params/payload/result", "must be an object")
    if has_error:
        err = message["error"]
        if not (
            isinstance(err, dict)
            and isinstance(err.get("code"), int)
            and not isinstance(err.get("code"), bool)
            and isinstance(err.get("message"), str)
        ):
            raise bad("/params/payload/error", "must be {code: integer, message: string}")


def message_kind(message: dict[str, Any]) -> MessageKind:
    """The kind of a message :func:`check_wrapped` accepted: ``request`` (a ``method``
    and an ``id``), ``notification`` (a ``method``, no ``id``) or ``response``."""
    if "method" not in message:
        return "response"
    return "request" if "id" in message else "notification"


def tool_facts(message: dict[str, Any], mcp_method: str) -> tuple[dict[str, str], dict[str, Any]]:
    """``(tool, args)`` for rules: for ``tools/call`` requests the tool name and arguments."""
    params = message.get("params") if "method" in message else None
    if mcp_method == "tools/call" and isinstance(params, dict):
        name = params.get("name")
        args = params.get("arguments")
        tool = {
            "name": name if isinstance(name, str) else "",
            "version": "",
            "provider": "mcp",
            "operation": "",
            "capability": "",
        }
        return tool, dict(args) if isinstance(args, dict) else {}
    return {"name": "", "version": "", "provider": "mcp", "operation": "", "capability": ""}, {}
