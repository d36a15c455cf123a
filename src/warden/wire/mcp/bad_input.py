"""What the proxy answers for a client line it cannot accept (JSON-RPC 2.0 §4.1, §5.1, §6).

The SDK's transports hand such a line to the server as an exception, which its
dispatcher drops with a DEBUG log: the client waits for an answer that never comes.
The proxy answers it itself, on the line it read, and forwards and records nothing
(docs/decisions.md 690–692):

- ``-32700`` Parse error, ``id: null``: bytes that are not UTF-8, not JSON (a lone
  surrogate escape included), or nested deeper than the parser's limit (200);
- ``-32600`` Invalid Request: JSON that is not a JSON-RPC 2.0 message (``{}``, a
  string, a request without ``jsonrpc`` or ``method``, an ``id`` that is neither a
  string nor an integer), with the request's ``id`` when it is one, else ``null``;
  a batch gets one such error per element that is not a notification, as an array
  (an empty batch: one error), since MCP 2025-06-18 has no batches;
- a malformed notification (an object with ``method`` and no ``id``) is not
  answered (JSON-RPC 2.0 §4.1), only logged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pydantic_core

#: The SDK's message model; a line it accepts is a message.
_ADAPTER = types.jsonrpc_message_adapter


@dataclass(frozen=True)
class Rejection:
    """Why a line was refused (``reason``, for the log) and the JSON-RPC error
    objects the client is answered (``errors``: none for a notification; one per
    answered element, written as an array, for a ``batch``)."""

    reason: str
    errors: tuple[dict[str, Any], ...]
    batch: bool = False

    @property
    def answer(self) -> bytes | None:
        """The JSON text to write on one line, or None when nothing is answered."""
        if not self.errors:
            return None
        return json.dumps(list(self.errors) if self.batch else self.errors[0]).encode()


def parse_line(line: bytes) -> types.JSONRPCMessage | Rejection:
    """The message on ``line`` (bytes without the newline), or why it is refused."""
    try:
        message = _ADAPTER.validate_json(line, by_name=False)
    except ValueError:
        return _reject(line)
    # The notification model ignores unknown keys, so a request whose id is not a
    # string or an integer (1.5, null) would pass as a notification and go unanswered.
    if isinstance(message, types.JSONRPCNotification) and b'"id"' in line:
        value = pydantic_core.from_json(line)
        if isinstance(value, dict) and "id" in value:
            return _invalid("id must be a string or an integer", None)
    return message


def rejection_for(exc: Exception) -> Rejection:
    """Why the SDK's own stdio transport refused a line, from the exception it yields
    in the line's place (used when stdin is a regular file; the SDK decoded the line
    with replacement, so invalid UTF-8 is not seen there)."""
    errors = exc.errors() if isinstance(exc, pydantic_core.ValidationError) else []
    if not errors:
        return _parse_error(str(exc))
    first = errors[0]
    if first["type"] == "json_invalid":
        # The input is the line as text: parse it again for the parser's message.
        text = first.get("input")
        return _reject(text.encode()) if isinstance(text, str) else _parse_error(first["msg"])
    # An error's input is the value at its location: the whole message for a union
    # member's own type error, or for a field missing from the message itself.
    for error in errors:
        loc = error["loc"]
        if len(loc) <= 1 or (len(loc) == 2 and error["type"] == "missing"):
            return _reject_value(error.get("input"))
    return _invalid("not a JSON-RPC 2.0 request, notification or response", None)


def _reject(line: bytes) -> Rejection:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _parse_error(f"not UTF-8 ({exc.reason} at byte {exc.start})")
    try:
        value = pydantic_core.from_json(line)
    except ValueError as exc:
        return _parse_error(str(exc))
    return _reject_value(value)


def _parse_error(detail: str) -> Rejection:
    text = f"Parse error: {detail}"
    return Rejection(text, (_error(types.PARSE_ERROR, text, None),))


def _reject_value(value: object) -> Rejection:
    if isinstance(value, list):
        if not value:
            return _invalid("an empty batch", None)
        text = "Invalid Request: batches are not supported"
        errors = tuple(
            _error(types.INVALID_REQUEST, text, _id(item))
            for item in value
            if not _is_notification(item)
        )
        return Rejection(f"{text} ({len(value)} elements)", errors, batch=True)
    if not isinstance(value, dict):
        return _invalid("not a JSON object", None)
    detail = _what_is_wrong(value)
    if _is_notification(value):
        return Rejection(f"Invalid Request (a notification, not answered): {detail}", ())
    return _invalid(detail, _id(value))


def _what_is_wrong(value: dict[str, Any]) -> str:
    if value.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in value and _id(value) is None:
        return "id must be a string or an integer"
    if "method" not in value and not ("result" in value or "error" in value):
        return "no method"
    return "not a JSON-RPC 2.0 request, notification or response"


def _is_notification(item: object) -> bool:
    return isinstance(item, dict) and "method" in item and "id" not in item


def _id(item: object) -> str | int | None:
    """The item's id when it is one MCP allows (a string or an integer), else None."""
    rid = item.get("id") if isinstance(item, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _invalid(detail: str, rid: str | int | None) -> Rejection:
    text = f"Invalid Request: {detail}"
    return Rejection(text, (_error(types.INVALID_REQUEST, text, rid),))


def _error(code: int, message: str, rid: str | int | None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
