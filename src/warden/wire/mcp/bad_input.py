"""What the proxy answers for a client line it cannot accept (JSON-RPC 2.0 §4.1, §5.1, §6).

The SDK's transports hand such a line to the server as an exception, which its
dispatcher drops with a DEBUG log: the client waits for an answer that never comes.
The proxy answers it itself, on the line it read, and forwards and records nothing
(docs/decisions.md 690–692):

- ``-32700`` Parse error: bytes that are not UTF-8, not strict JSON (Warden's parser,
  as ``/acs``: a duplicate key, ``NaN``/``Infinity``, a number that overflows a double,
  a lone surrogate escape), or nested deeper than 200 levels; ``id: null``, or the
  request's id when the line is JSON apart from such a number or key (760–762);
- ``-32602`` Invalid params, the request's id: a ``tools/call`` whose params hold an
  integer outside the RFC 8785 domain, named by its JSON pointer (763); a request that
  also carries ``result`` or ``error`` (a notification that does is only logged), as
  ``/acs`` refuses such a wrapped message (856);
- ``-32600`` Invalid Request: JSON that is not a JSON-RPC 2.0 message (``{}``, a
  string, a request without ``jsonrpc`` or ``method``, an ``id`` that is neither a
  string nor an integer), with the request's ``id`` when it is one, else ``null``;
  a batch gets one such error per element that is not a notification, as an array
  (an empty batch: one error), since MCP 2025-06-18 has no batches;
- ``-32600``, ``id: null``: a line longer than ``--max-line-bytes`` (900), dropped as
  it is read;
- a malformed notification (an object with ``method`` and no ``id``) is not
  answered (JSON-RPC 2.0 §4.1), only logged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from warden.crypto.canonical import number_outside_jcs_at, parse_request_json
from warden.errors import ParseError

#: An integer beyond ±(2^53−1) has at least 16 digits: a line without such a run has
#: none, and its params are not walked.
_SIXTEEN_DIGITS = re.compile(rb"[0-9]{16}")

#: The deepest nesting a line may have: the SDK's parser's (jiter's) limit, kept.
MAX_DEPTH = 200

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
    #: What an HTTP transport, which answers every POST, sends when ``errors`` is empty.
    unanswered: str = "Invalid Request"

    @property
    def answer(self) -> bytes | None:
        """The JSON text to write on one line, or None when nothing is answered."""
        if not self.errors:
            return None
        return json.dumps(list(self.errors) if self.batch else self.errors[0]).encode()

    @property
    def http_answer(self) -> bytes:
        """:attr:`answer`, or for nothing answered one ``-32600`` with ``id: null``
        (MCP Streamable HTTP: a refused notification gets an HTTP error status)."""
        return (
            self.answer or json.dumps(_error(types.INVALID_REQUEST, self.unanswered, None)).encode()
        )


def parse_line(line: bytes) -> types.JSONRPCMessage | Rejection:
    """The message on ``line`` (bytes without the newline), or why it is refused.

    One strict parse (Warden's, as ``/acs`` parses: no duplicate keys, no ``NaN`` or
    ``Infinity``, no number that overflows a double, no lone surrogate, at most
    :data:`MAX_DEPTH` levels), then the SDK's model on the parsed value."""
    try:
        value = parse_request_json(line, max_depth=MAX_DEPTH, finite=True)
    except ParseError as exc:
        # A lone surrogate is answered with a null id (its line is not Unicode text);
        # every other parse error echoes the id when it can be read.
        rid = None if exc.reason == "lone_surrogate" else _readable_id(line, exc.reason)
        return _parse_error(exc.message, rid)
    message = message_of(value)
    if (
        isinstance(message, types.JSONRPCRequest)
        and message.method == "tools/call"
        and _SIXTEEN_DIGITS.search(line) is not None  # else no integer beyond 2^53
    ):
        at = number_outside_jcs_at(value.get("params"), "/params")
        if at is not None:
            return _invalid_params(at, message.id)
    return message


def message_of(value: Any) -> types.JSONRPCMessage | Rejection:
    """The JSON-RPC message ``value`` (strictly parsed JSON) is, or why it is refused;
    also used by the AdCP agent's ``/mcp`` (docs/decisions.md 833)."""
    try:
        message = _ADAPTER.validate_python(value, by_name=False)
    except ValueError:
        return _reject_value(value)
    # The notification model ignores unknown keys, so a request whose id is not a
    # string or an integer (1.5, null) would pass as a notification and go unanswered.
    if isinstance(message, types.JSONRPCNotification) and "id" in value:
        return _invalid("id must be a string or an integer", None)
    # The models drop what they do not know, so `method` or `params` beside `result` or
    # `error` would pass as one or the other: refused, as `/acs` refuses such a wrapped
    # message, instead of forwarded without half of it.
    if ("method" in value or "params" in value) and ("result" in value or "error" in value):
        rid = _id(value)
        errors = (_error(types.INVALID_PARAMS, _BOTH, rid),) if rid is not None else ()
        return Rejection(_BOTH, errors)
    return message


def _readable_id(line: bytes, reason: str) -> str | int | None:
    """The request's id for a line that is JSON but not strict JSON (a ``NaN`` token,
    an overflowing number, a duplicate key other than a top-level ``id``); else None."""
    if reason not in ("non_standard_number", "duplicate_key"):
        return None
    try:
        # Lenient: NaN and Infinity accepted, members kept as pairs (duplicates seen).
        pairs = json.loads(line, object_pairs_hook=lambda p: p)
    except (ValueError, RecursionError):
        return None
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return None
    ids = [v for k, v in pairs if k == "id"]
    return _id({"id": ids[0]}) if len(ids) == 1 else None


def _invalid_params(at: str, rid: str | int) -> Rejection:
    text = (
        f"Invalid params: the integer at {at} is outside the RFC 8785 (JCS) domain "
        "(beyond ±(2^53−1) and not the RFC 8785 form of a double); send it as a string"
    )
    return Rejection(text, (_error(types.INVALID_PARAMS, text, rid),))


def too_long(size: int, limit: int) -> Rejection:
    """A line longer than the proxy reads (``--max-line-bytes``): discarded unread, so
    ``-32600`` with ``id: null`` (decision 900)."""
    return _invalid(
        f"a line of {size} bytes is longer than the proxy's limit of {limit} bytes "
        "(warden mcp-proxy --max-line-bytes); it was discarded unread",
        None,
    )


def _parse_error(detail: str, rid: str | int | None = None) -> Rejection:
    text = f"Parse error: {detail}"
    return Rejection(text, (_error(types.PARSE_ERROR, text, rid),))


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
        return Rejection(f"{text} ({len(value)} elements)", errors, batch=True, unanswered=text)
    if not isinstance(value, dict):
        return _invalid("not a JSON object", None)
    detail = _what_is_wrong(value)
    if _is_notification(value):
        reason = f"Invalid Request (a notification, not answered): {detail}"
        return Rejection(reason, (), unanswered=f"Invalid Request: {detail}")
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


_BOTH = (
    "Invalid params: a JSON-RPC message is a request or a response, not both "
    "(it carries method beside result or error)"
)


def _id(item: object) -> str | int | None:
    """The item's id when it is one MCP allows (a string or an integer), else None."""
    rid = item.get("id") if isinstance(item, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _invalid(detail: str, rid: str | int | None) -> Rejection:
    text = f"Invalid Request: {detail}"
    return Rejection(text, (_error(types.INVALID_REQUEST, text, rid),))


def _error(code: int, message: str, rid: str | int | None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
