"""``tools/call`` to the real server straight on its stdio transport's streams.

:class:`mcp.client.session.ClientSession` keeps the upstream connection (handshake,
lists, reads, prompts, server requests and notifications), but a ``tools/call``
through it pays for its request machinery (request models, a dispatcher, response
streams): about 0.3 ms of the proxy's added time on this machine. A router task
sits between the transport and the session: it hands the session every message
except the answers to the calls sent here, whose ids (``warden-<n>``) the session
never uses. What the session checks on an answer is checked here too, with the
same functions: the result against the negotiated version's schema
(``validate_server_result``'s model, :mod:`warden.transport.mcp_results`), the
``CallToolResult`` model, and the tool's output schema
(``ClientSession.validate_tool_result``; a result that a compiled validator accepts
under a schema of plain keywords skips the SDK's slower check,
:class:`OutputSchemas`). A call that outlives the upstream
timeout is cancelled upstream and fails with the SDK's REQUEST_TIMEOUT; a closed
connection fails every call in flight with CONNECTION_CLOSED, as the SDK does
(docs/decisions.md 654).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, Protocol

import anyio
import jsonschema_rs
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from jsonschema import Draft202012Validator
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from warden.transport.mcp_results import check_result, request_line

_Answer = types.JSONRPCResponse | types.JSONRPCError
_CLOSED = types.ErrorData(code=types.CONNECTION_CLOSED, message="Connection closed")


class _Sender(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


class DirectCalls:
    """The ``tools/call`` side channel of one upstream connection."""

    def __init__(self, write: _Sender, timeout_s: float) -> None:
        self._write = write
        #: A memory stream's ``send_nowait`` (what the SDK's transports give); None for
        #: a writer without one.
        self._send_nowait: Callable[[SessionMessage], None] | None = getattr(
            write, "send_nowait", None
        )
        #: A writer's ``send_line`` (:class:`~warden.transport.upstream_stdio.PipeWriter`:
        #: the request's JSON line written as it is); None for a writer without one.
        self._send_line: Callable[[bytes], Awaitable[None]] | None = getattr(
            write, "send_line", None
        )
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._pending: dict[str, list[_Answer]] = {}
        #: Per call in flight, the future its caller awaits (set when answered, closed,
        #: or timed out: see :meth:`call_tool`).
        self._waiters: dict[str, asyncio.Future[bool]] = {}
        #: Per call in flight, its deadline on the loop's clock; one loop timer
        #: (:meth:`_expire`) watches the earliest of them (decision 961).
        self._deadlines: dict[str, float] = {}
        self._watch: asyncio.TimerHandle | None = None
        self._closed = False
        self.session: ClientSession | None = None
        self._schemas = OutputSchemas()

    @property
    def usable(self) -> bool:
        """Whether calls may go this way: a handshake-era session (a 2026-07-28 one
        needs the SDK's per-request envelope)."""
        version = self.session.protocol_version if self.session is not None else None
        return version is not None and version not in MODERN_PROTOCOL_VERSIONS

    async def route(
        self,
        transport: AsyncIterable[SessionMessage | Exception],
        to_session: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        """Pass the transport's messages to the session, keeping the answers to our calls."""
        try:
            async with to_session:
                async for item in transport:
                    if not self.deliver(item):
                        await to_session.send(item)
        finally:
            self.closed()

    def deliver(self, item: SessionMessage | Exception) -> bool:
        """Hand ``item`` to the call it answers; False when it answers none made here."""
        if isinstance(item, SessionMessage):
            msg = item.message
            if isinstance(msg, _Answer) and isinstance(msg.id, str):
                slot = self._pending.get(msg.id)
                if slot is not None:
                    slot.append(msg)
                    _settle(self._waiters[msg.id], True)
                    return True
        return False

    def closed(self) -> None:
        """The connection ended: every call in flight, and every later one, fails."""
        self._closed = True
        for waiter in self._waiters.values():
            _settle(waiter, True)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """The real server's ``CallToolResult``; :class:`MCPError` for an error answer."""
        session = self.session
        version = session.protocol_version if session is not None else None
        if session is None or version is None or self._closed:
            raise MCPError(code=types.CONNECTION_CLOSED, message="Connection closed")
        rid = f"warden-{next(self._ids)}"
        slot: list[_Answer] = []
        # A bare future and a loop timer rather than an anyio Event and a cancel scope
        # (decision 853): the same wait, for a few µs less per call. The proxy runs on
        # asyncio; a cancellation of the caller still arrives here as CancelledError.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._pending[rid], self._waiters[rid] = slot, waiter
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        try:
            if self._send_line is not None:
                # The same line the request model would be dumped to (decision 882).
                await self._send_line(request_line(rid, params))
            else:
                request = types.JSONRPCRequest(
                    jsonrpc="2.0", id=rid, method="tools/call", params=params
                )
                await self._send(SessionMessage(request))
            self._deadlines[rid] = deadline = loop.time() + self._timeout_s
            if self._watch is None:
                self._watch = loop.call_at(deadline, self._expire)
            answered = await waiter
        except anyio.get_cancelled_exc_class():
            # Our caller was cancelled (the client cancelled its call): tell the server,
            # as the SDK's courtesy cancel does.
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._cancel(rid, "cancelled by the client")
            raise
        finally:
            self._deadlines.pop(rid, None)
            del self._pending[rid], self._waiters[rid]
        if not answered:
            await self._cancel(rid, f"timed out after {self._timeout_s}s")
            raise MCPError(code=types.REQUEST_TIMEOUT, message="Request 'tools/call' timed out")
        answer = slot[0] if slot else types.JSONRPCError(jsonrpc="2.0", id=rid, error=_CLOSED)
        if isinstance(answer, types.JSONRPCError):
            raise MCPError.from_error_data(answer.error)
        with contextlib.suppress(KeyError):  # no tools/call surface: as the SDK, no check
            check_result(version, answer.result)  # validate_server_result, without its dump
        result = types.CallToolResult.model_validate(answer.result, by_name=False)
        if not result.is_error and not self._schemas.accepts(session, name, result):
            await session.validate_tool_result(name, result)
        return result

    def _expire(self) -> None:
        """Time out every call past its deadline; watch the earliest one left.

        One timer for all calls instead of a ``call_later`` per call (and its cancel):
        it is set when a call starts and none is set, and fires at the earliest deadline
        among the calls then in flight, so each call still times out at its own
        deadline (decision 961)."""
        self._watch = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest: float | None = None
        for rid, deadline in self._deadlines.items():
            waiter = self._waiters[rid]
            if waiter.done():
                continue
            if deadline <= now:
                _settle(waiter, False)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        if earliest is not None:
            self._watch = loop.call_at(earliest, self._expire)

    async def _send(self, item: SessionMessage) -> None:
        """Hand ``item`` to the transport's writer at once when it is waiting for one
        (the usual case), without the loop pass ``send`` takes first; else wait for it."""
        if self._send_nowait is not None:
            try:
                self._send_nowait(item)
                return
            except anyio.WouldBlock:
                pass
        await self._write.send(item)

    async def _cancel(self, rid: str, reason: str) -> None:
        params = {"requestId": rid, "reason": reason}
        note = types.JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params=params
        )
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._write.send(SessionMessage(note))


def _settle(waiter: asyncio.Future[bool], answered: bool) -> None:
    """Wake a call's caller: ``answered`` (or closed), else timed out; the first wins."""
    if not waiter.done():
        waiter.set_result(answered)


#: Keywords whose meaning the SDK's validator (python-jsonschema, draft 2020-12) and
#: jsonschema-rs agree on exactly; a schema with any other (``format``, ``pattern``,
#: ``multipleOf``, ``uniqueItems``, ``$id``, ``$dynamicRef``, ``unevaluated*`` …) is left
#: to the SDK alone.
_SUBSCHEMA = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})
_PLAIN = frozenset(
    {
        "type", "required", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
        "minProperties", "maxProperties", "title", "description", "default", "examples",
        "$comment", "deprecated", "readOnly", "writeOnly",
    }
)  # fmt: skip
_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def _plain(schema: Any, *, root: bool = False) -> bool:
    """Whether ``schema`` uses only the keywords both validators read alike, its
    ``$ref`` s pointing inside it (``#/…``), in the SDK's default dialect (2020-12)."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key in _PLAIN:
            continue
        if key in _SUBSCHEMA:
            ok = _plain(value)
        elif key in _SCHEMA_LISTS:
            ok = isinstance(value, list) and all(_plain(v) for v in value)
        elif key in _SCHEMA_MAPS:
            ok = isinstance(value, dict) and all(_plain(v) for v in value.values())
        elif key == "$ref":
            ok = isinstance(value, str) and (value == "#" or value.startswith("#/"))
        elif key == "$schema":
            ok = root and value == _DRAFT_2020_12
        else:
            ok = False
        if not ok:
            return False
    return True


class OutputSchemas:
    """A fast acceptance of tool results, before the SDK's own output-schema check.

    The SDK validates ``structuredContent`` with python-jsonschema, walking the schema
    in Python for every result (tens of µs a call). Here a result is accepted at once
    when the tool's schema (the one the SDK session holds) is :func:`_plain` and a
    compiled jsonschema-rs validator (offline: no reference is fetched) finds it
    valid. Anything else — no schema known yet, a schema with other keywords, missing
    structured content, a result the validator rejects, a validator that cannot be
    built — goes to ``ClientSession.validate_tool_result``, which gives the SDK's
    answer and error text; so a result is never accepted that the SDK would refuse,
    only accepted sooner (docs/decisions.md 851)."""

    def __init__(self) -> None:
        #: tool → (the schema object it was built from, its validator or None).
        self._compiled: dict[str, tuple[object, Any]] = {}

    def accepts(self, session: Any, name: str, result: types.CallToolResult) -> bool:
        schemas = getattr(session, "_tool_output_schemas", None)
        if not isinstance(schemas, dict) or name not in schemas:
            return False
        schema = schemas[name]
        if schema is None or result.structured_content is None:
            return False
        cached = self._compiled.get(name)
        if cached is None or cached[0] is not schema:
            cached = self._compiled[name] = (schema, _compile(schema))
        validator = cached[1]
        if validator is None:
            return False
        try:
            return bool(validator.is_valid(result.structured_content))
        except Exception:  # noqa: BLE001 - a value it cannot take: the SDK decides
            return False


def _compile(schema: Any) -> Any:
    if not _plain(schema, root=True):
        return None
    try:
        # The SDK refuses a schema its metaschema refuses (on every call): so does this.
        Draft202012Validator.check_schema(schema)
        return jsonschema_rs.Draft202012Validator(schema, validate_formats=False, offline=True)
    except Exception:  # noqa: BLE001 - not compilable here: the SDK decides (and reports)
        return None
