"""The AdCP task envelope (seed ``001_…``, ``core/protocol-envelope.json``;
specs/adcp-spend-kla.md §1.1–§1.3) and the errors the wire answers with.

Every response carries ``status`` (never ``task_status``/``response_status``), a
``timestamp``, the server's ``context_id``, ``replayed`` and, when the request had
one, its ``context`` echoed unchanged. A fatal failure is :class:`AdcpError`: it renders
as ``status: failed`` with the canonical ``errors[]`` *and* the envelope's
``adcp_error`` (the two-layer model), each with its code from ``enums/error-code.json``
and that code's ``recovery``. Warnings go only in ``errors[]``.

"Absent" and "not yours" are one answer: the wire raises the same :class:`AdcpError`
(same code, message and HTTP status) for both, so nothing can tell them apart.
"""

from __future__ import annotations

import json
from typing import Any

from warden.adcp.errors import AdcpError
from warden.crypto.canonical import lone_surrogate_at
from warden.errors import ParseError
from warden.timestamps import utc_millis

#: The release this agent speaks, on every response (``core/version-envelope.json``:
#: release precision, so ``3.2``, not ``3.2.0-beta.0``).
ADCP_VERSION = "3.2"


def unparsable(exc: ParseError) -> AdcpError:
    """The answer to a body that is not strict JSON, the same on ``/adcp/<task>`` and
    ``/mcp``: ``INVALID_REQUEST`` naming the problem in
    :func:`~warden.crypto.canonical.parse_request_json`'s words ("body is not valid
    UTF-8", "arrays and objects are nested deeper than 128 levels", …)."""
    return AdcpError("INVALID_REQUEST", f"the body is not strict JSON: {exc.message}")


def echoable_context_id(value: Any) -> str | None:
    """``value`` if it can be echoed as a ``context_id`` (a non-empty string that is
    valid Unicode), else None."""
    if isinstance(value, str) and value and lone_surrogate_at(value) is None:
        return value
    return None


def envelope(
    body: dict[str, Any],
    *,
    status: str,
    context_id: str,
    context: Any = None,
    replayed: bool = False,
    message: str | None = None,
    task_id: str | None = None,
) -> dict[str, Any]:
    """``body`` with the envelope fields at its root (the MCP and REST serialization).

    ``context`` is echoed when not None (the request's ``context``). The legacy
    ``task_status``/``response_status`` are never written.
    """
    out: dict[str, Any] = {"status": status}
    if task_id is not None:
        out["task_id"] = task_id
    if message is not None:
        out["message"] = message
    out.update(body)
    out["status"] = status
    out["adcp_version"] = ADCP_VERSION
    out["context_id"] = context_id
    out["timestamp"] = utc_millis()
    out["replayed"] = replayed
    if context is not None:
        out["context"] = context
    return out


def failure(error: AdcpError, *, context_id: str, context: Any = None) -> dict[str, Any]:
    """A fatal failure: ``status: failed``, ``errors[]`` and ``adcp_error`` alike."""
    wire = error.to_wire()
    return envelope(
        {"errors": [wire], "adcp_error": wire},
        status="failed",
        context_id=context_id,
        context=context,
        message=error.message,
    )


def top_level_spans(raw: str) -> dict[str, tuple[int, int]]:
    """``member → (start, end)`` of each top-level member value of the JSON object
    ``raw`` (used to echo ``context`` byte for byte). Empty if ``raw`` is no object."""
    decoder = json.JSONDecoder()
    spans: dict[str, tuple[int, int]] = {}
    i = _ws(raw, 0)
    if i >= len(raw) or raw[i] != "{":
        return {}
    i = _ws(raw, i + 1)
    if i < len(raw) and raw[i] == "}":
        return {}
    try:
        while True:
            key, i = decoder.raw_decode(raw, i)
            i = _ws(raw, i)
            if raw[i] != ":":
                return {}
            start = _ws(raw, i + 1)
            _, end = decoder.raw_decode(raw, start)
            if isinstance(key, str):
                spans[key] = (start, end)
            i = _ws(raw, end)
            if raw[i] == "}":
                return spans
            if raw[i] != ",":
                return {}
            i = _ws(raw, i + 1)
    except (ValueError, IndexError):
        return {}


def _ws(raw: str, i: int) -> int:
    while i < len(raw) and raw[i] in " \t\r\n":
        i += 1
    return i


def dump_with_raw_context(body: dict[str, Any], raw_context: str | None) -> bytes:
    """``body`` as compact JSON, its ``context`` member replaced by the request's raw
    ``context`` text (so the echo is byte for byte, numbers and escapes included)."""
    if raw_context is None or "context" not in body:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    rest = {k: v for k, v in body.items() if k != "context"}
    text = json.dumps(rest, ensure_ascii=False, separators=(",", ":"))
    joiner = "," if rest else ""
    return (text[:-1] + joiner + '"context":' + raw_context + "}").encode("utf-8")
