"""``DirectCalls`` (decision 654): the proxy's ``tools/call`` straight on the upstream
transport — answers routed back by id, everything else to the SDK session, the SDK's
timeout and closed-connection errors, and the same result checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from warden.transport.mcp_direct_calls import DirectCalls


class FakeSession:
    """What DirectCalls asks of the SDK session: its version and the output-schema check."""

    def __init__(self, version: str = "2025-06-18") -> None:
        self.protocol_version = version
        self.validated: list[str] = []

    async def validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        self.validated.append(name)


@asynccontextmanager
async def wired(timeout_s: float = 5.0, version: str = "2025-06-18") -> AsyncIterator[Any]:
    """A DirectCalls over memory streams, all closed on exit: (direct, session, what it
    sent upstream, the upstream's side, its transport, the session's input, what the
    session reads)."""
    to_upstream, upstream_reads = anyio.create_memory_object_stream[SessionMessage](10)
    from_upstream, transport = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    to_session, session_reads = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    direct = DirectCalls(to_upstream, timeout_s)
    session = FakeSession(version)
    direct.session = cast(ClientSession, session)
    streams = (to_upstream, upstream_reads, from_upstream, transport, to_session, session_reads)
    try:
        yield direct, session, upstream_reads, from_upstream, transport, to_session, session_reads
    finally:
        for stream in streams:
            await stream.aclose()


def answer(rid: Any, result: dict[str, Any]) -> SessionMessage:
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=rid, result=result))


OK = {"content": [{"type": "text", "text": "12:00"}], "isError": False}


def run(body: Callable[..., Awaitable[None]], **kw: Any) -> None:
    """Run ``body(w)`` with :func:`wired` streams and the router going, on asyncio."""

    async def main() -> None:
        async with wired(**kw) as w, anyio.create_task_group() as tg:
            direct, _s, _u, _f, transport, to_session, _r = w
            tg.start_soon(direct.route, transport, to_session)
            await body(*w)
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_answers_come_back_by_id_and_the_rest_goes_to_the_session() -> None:
    got: list[types.CallToolResult] = []

    async def body(direct: Any, session: Any, upstream: Any, from_up: Any, *rest: Any) -> None:
        session_reads = rest[-1]
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await direct.call_tool("now", {"tz": "UTC"}))

            tg.start_soon(call)
            sent = (await upstream.receive()).message
            assert isinstance(sent, types.JSONRPCRequest) and sent.method == "tools/call"
            assert sent.params == {"name": "now", "arguments": {"tz": "UTC"}}
            # The session's own answer (an integer id) and a notification pass through.
            await from_up.send(answer(7, {}))
            note = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message")
            await from_up.send(SessionMessage(note))
            await from_up.send(answer(sent.id, OK))
            first, second = await session_reads.receive(), await session_reads.receive()
            assert first.message.id == 7
            assert second.message == note
        assert got[0].content[0].text == "12:00"
        assert session.validated == ["now"]
        assert direct.usable

    run(body)


def test_an_error_answer_is_an_mcp_error_and_a_bad_result_fails_validation() -> None:
    async def body(direct: Any, _s: Any, upstream: Any, from_up: Any, *_: Any) -> None:
        async def reply(make: Callable[[Any], SessionMessage]) -> None:
            sent = (await upstream.receive()).message
            await from_up.send(make(sent.id))

        async with anyio.create_task_group() as tg:
            err = types.ErrorData(code=-32602, message="Unknown tool")
            tg.start_soon(
                reply,
                lambda rid: SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=err)),
            )
            with pytest.raises(MCPError) as caught:
                await direct.call_tool("nope", None)
            assert caught.value.error.code == -32602
            tg.start_soon(reply, lambda rid: answer(rid, {"content": "not a list"}))
            with pytest.raises(ValidationError):
                await direct.call_tool("now", None)

    run(body)


def test_a_call_that_outlives_the_timeout_is_cancelled_upstream() -> None:
    async def body(direct: Any, _s: Any, upstream: Any, *_: Any) -> None:
        with pytest.raises(MCPError) as caught:
            await direct.call_tool("slow", {})
        assert caught.value.error.code == types.REQUEST_TIMEOUT
        request = (await upstream.receive()).message
        cancel = (await upstream.receive()).message
        assert isinstance(cancel, types.JSONRPCNotification)
        assert cancel.method == "notifications/cancelled"
        assert cancel.params is not None and cancel.params["requestId"] == request.id

    run(body, timeout_s=0.2)


def test_a_caller_cancelled_while_waiting_cancels_upstream() -> None:
    async def body(direct: Any, _s: Any, upstream: Any, *_: Any) -> None:
        with anyio.move_on_after(0.2):
            await direct.call_tool("slow", {})
        request = (await upstream.receive()).message
        cancel = (await upstream.receive()).message
        assert cancel.method == "notifications/cancelled"
        assert cancel.params["requestId"] == request.id
        assert cancel.params["reason"] == "cancelled by the client"

    run(body)


def test_a_closed_connection_fails_the_calls_in_flight_and_after() -> None:
    async def body(direct: Any, _s: Any, upstream: Any, from_up: Any, *_: Any) -> None:
        async def close_after_request() -> None:
            await upstream.receive()
            await from_up.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(close_after_request)
            with pytest.raises(MCPError) as caught:
                await direct.call_tool("now", {})
            assert caught.value.error.code == types.CONNECTION_CLOSED
        with pytest.raises(MCPError) as again:
            await direct.call_tool("now", {})
        assert again.value.error.code == types.CONNECTION_CLOSED

    run(body)


def test_a_modern_session_is_left_to_the_sdk() -> None:
    async def body(direct: Any, *_: Any) -> None:
        assert not direct.usable

    run(body, version="2026-07-28")


TIME_SCHEMA = {
    "type": "object",
    "title": "TimeResult",
    "properties": {"timezone": {"type": "string"}, "is_dst": {"type": "boolean"}},
    "required": ["timezone", "is_dst"],
}


class SchemaSession(FakeSession):
    """A session holding tool output schemas, as the SDK's does after tools/list."""

    def __init__(self, schemas: dict[str, Any]) -> None:
        super().__init__()
        self._tool_output_schemas = schemas


def structured(value: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[], structured_content=value)


def test_a_result_a_plain_schema_accepts_skips_the_sdk_check_and_the_rest_does_not() -> None:
    from warden.transport.mcp_direct_calls import OutputSchemas

    with_format = {**TIME_SCHEMA, "properties": {"timezone": {"type": "string", "format": "x"}}}
    remote_ref = {"$ref": "https://example.invalid/schema.json"}
    session = SchemaSession(
        {"time": TIME_SCHEMA, "formatted": with_format, "remote": remote_ref, "none": None}
    )
    fast = OutputSchemas()
    good = structured({"timezone": "UTC", "is_dst": False})
    assert fast.accepts(session, "time", good)
    # Refused by the schema, or unknown here: the SDK's check decides (and words the error).
    assert not fast.accepts(session, "time", structured({"timezone": "UTC"}))
    assert not fast.accepts(session, "time", structured({"timezone": 1, "is_dst": False}))
    assert not fast.accepts(session, "time", structured(None))
    assert not fast.accepts(session, "formatted", good)
    assert not fast.accepts(session, "remote", good)
    assert not fast.accepts(session, "none", good)
    assert not fast.accepts(session, "unlisted", good)
    assert not fast.accepts(FakeSession(), "time", good)
    # A new listing's schema replaces the compiled one.
    session._tool_output_schemas["time"] = {**TIME_SCHEMA, "required": ["missing"]}
    assert not fast.accepts(session, "time", good)
    # A schema the SDK's metaschema check refuses is never accepted here.
    session._tool_output_schemas["time"] = {"type": "object", "minProperties": -1}
    assert not fast.accepts(session, "time", good)


def test_direct_calls_leave_only_what_the_fast_check_cannot_accept_to_the_sdk() -> None:
    async def body(direct: Any, _s: Any, upstream: Any, from_up: Any, *_: Any) -> None:
        session = SchemaSession({"now": TIME_SCHEMA})
        direct.session = cast(ClientSession, session)
        for content in ({"timezone": "UTC", "is_dst": False}, {"timezone": "UTC"}):

            async def reply(content: dict[str, Any] = content) -> None:
                request = (await upstream.receive()).message
                await from_up.send(answer(request.id, {**OK, "structuredContent": content}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(reply)
                await direct.call_tool("now", {})
        assert session.validated == ["now"]  # only the second result

    run(body)
