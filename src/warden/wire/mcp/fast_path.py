"""The client side of the proxy over a :class:`StdioChannel`, with a ``tools/call`` fast path.

Every line from the client is parsed strictly (Warden's parser) and validated with the
SDK's JSON-RPC message model; a line refused (not UTF-8, not strict JSON, not a
JSON-RPC message) is answered here with a JSON-RPC error
(:mod:`warden.wire.mcp.bad_input`) and goes no further. A ``tools/call`` request on
a handshake-era connection is then answered here, beside the SDK's server rather
than through it: the same checks the SDK's dispatcher makes (the request against the
negotiated version's schema, the params model), the same governed handler
(:meth:`Proxy.govern_tool_call`), the same result validation and shaping for that
version, the same error mapping, and the same rule that a request the client
cancelled is not answered. What it skips is the SDK's per-request machinery
(dispatch tasks, middleware, memory streams, contexts): about a third of the
proxy's added time. Everything else — the handshake, lists, reads, prompts,
notifications, pings, a malformed ``tools/call`` — goes to the SDK's server as
before (docs/decisions.md 651).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import SessionMessage
from mcp_types import methods
from pydantic import ValidationError

from warden.transport.call_tasks import CallCancel, Calls
from warden.transport.mcp_results import answer_line
from warden.transport.stdio_channel import Ahead, StdioChannel, TooLong
from warden.wire.mcp.bad_input import Rejection, parse_line, too_long

if TYPE_CHECKING:
    from warden.wire.mcp.proxy import Proxy

log = logging.getLogger(__name__)


async def serve_channel(proxy: Proxy, server: Server[Any], channel: StdioChannel) -> None:
    """Serve one MCP client on ``channel`` until its input ends and every answer is out."""
    to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_out, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    in_flight: dict[Any, CallCancel] = {}
    calls = Calls()
    ahead: Ahead[types.JSONRPCMessage | Rejection] = Ahead()

    def take(line: bytes) -> bool:  # in the loop's reader callback (decision 1110)
        if not line.strip():
            return True
        message = ahead.keep(line, parse_line(line))  # for `read`, if not taken here
        return not isinstance(message, Rejection) and _take(
            proxy, message, calls, channel, in_flight
        )

    async def read() -> None:
        async with to_server:
            async for line in channel.lines(take):
                if isinstance(line, TooLong):
                    rejection = too_long(line.size, line.limit)
                    log.warning("refused a client line: %s", rejection.reason)
                    await _write(channel, rejection.answer or b"")
                    continue
                if not line.strip():
                    continue  # a blank line carries no message (decision 692)
                message = ahead.get(line, parse_line)
                if isinstance(message, Rejection):
                    # Answered here: the SDK's server would drop it unanswered.
                    log.warning("refused a client line of %d bytes: %s", len(line), message.reason)
                    if message.answer is not None:
                        await _write(channel, message.answer)
                    continue
                if not _take(proxy, message, calls, channel, in_flight):
                    await to_server.send(SessionMessage(message))

    async def write() -> None:
        async with from_server:
            async for out in from_server:
                await _send(channel, out.message)

    try:
        async with anyio.create_task_group() as tg:
            calls.scope = tg.cancel_scope
            tg.start_soon(read)
            tg.start_soon(write)
            async with server_out:
                await server.run(server_in, server_out, server.create_initialization_options())
        await calls.drain()  # the input ended: the calls still running answer first
    finally:
        await calls.cancel()
    if calls.failure is not None:
        raise calls.failure


def _take(
    proxy: Proxy,
    message: types.JSONRPCMessage,
    calls: Calls,
    channel: StdioChannel,
    in_flight: dict[Any, CallCancel],
) -> bool:
    """Whether the fast path took ``message`` (a ``tools/call`` it answers, or the
    cancellation of one); False leaves it to the SDK's server."""
    version = proxy.fast_version
    if version is None:
        return False
    if isinstance(message, types.JSONRPCNotification):
        if message.method != "notifications/cancelled":
            return False
        scope = in_flight.get((message.params or {}).get("requestId"))
        if scope is None:
            return False
        scope.cancel()
        return True
    if not isinstance(message, types.JSONRPCRequest) or message.method != "tools/call":
        return False
    if message.id in in_flight:
        return False
    try:
        # The SDK dispatcher's two checks; a call that fails them gets the SDK's answer.
        methods.validate_client_request("tools/call", version, message.params)
        params = types.CallToolRequestParams.model_validate(message.params or {}, by_name=False)
    except Exception:  # noqa: BLE001 - not ours to answer
        return False
    scope = in_flight[message.id] = CallCancel()
    calls.start(_call(proxy, message, params.name, version, channel, in_flight, scope))
    return True


async def _call(
    proxy: Proxy,
    message: types.JSONRPCRequest,
    name: str,
    version: str,
    channel: StdioChannel,
    in_flight: dict[Any, CallCancel],
    scope: CallCancel,
) -> None:
    """Answer one ``tools/call``, unless the client cancelled it first."""
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": message.id, "method": "tools/call"}
    if message.params is not None:
        request["params"] = dict(message.params)
    answer: types.JSONRPCMessage | bytes | None = None
    try:
        with scope:
            try:
                result = await proxy.govern_tool_call(request, name)
            except Exception as exc:  # noqa: BLE001 - mapped as the SDK's dispatcher maps it
                error = handler_exception_to_error_data(exc)
                if error is None:
                    log.exception("handler for 'tools/call' raised")
                    error = types.ErrorData(code=0, message=str(exc))
                answer = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
            else:
                try:
                    # serialize_server_result in a JSONRPCResponse, validated and written
                    # once (decision 882).
                    answer = answer_line(version, message.id, result)
                except ValidationError:
                    log.exception("handler for 'tools/call' returned an invalid result")
                    invalid = types.ErrorData(
                        code=types.INTERNAL_ERROR, message="Handler returned an invalid result"
                    )
                    answer = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=invalid)
    finally:
        in_flight.pop(message.id, None)
    if answer is not None and not scope.called:
        if isinstance(answer, bytes):
            await _write(channel, answer)
        else:
            await _send(channel, answer)


async def _send(channel: StdioChannel, message: types.JSONRPCMessage) -> None:
    await _write(channel, message.model_dump_json(by_alias=True, exclude_unset=True).encode())


async def _write(channel: StdioChannel, data: bytes) -> None:
    try:
        await channel.write_line(data)
    except (BrokenPipeError, ConnectionResetError):
        log.debug("the client is gone; an answer was dropped")
