"""The proxy's hand-offs that take no event-loop pass (decision 720): the answer's
write when nothing else is writing, and the upstream request when the transport's
writer is waiting. Each test schedules a task first: had the hand-off yielded to the
loop, that task would have run before it returned."""

from __future__ import annotations

import os

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from warden.transport.mcp_direct_calls import DirectCalls
from warden.transport.stdio_channel import StdioChannel


def _request(rid: str) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCRequest(jsonrpc="2.0", id=rid, method="tools/call", params={"name": "t"})
    )


async def _note(ran: list[str]) -> None:
    ran.append("other task")


def test_an_uncontended_answer_is_written_without_a_loop_pass() -> None:
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    ran: list[str] = []

    async def main() -> None:
        channel = StdioChannel(-1, wfd)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_note, ran)
            await channel.write_line(b'{"jsonrpc":"2.0","id":1,"result":{}}')
            assert ran == []  # written before the loop ran anything else
        assert ran == ["other task"]

    try:
        anyio.run(main)
        assert os.read(rfd, 1024) == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    finally:
        os.close(rfd)
        os.close(wfd)


def test_lines_stay_whole_when_a_writer_waits_for_a_full_pipe() -> None:
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    big = b"a" * (1 << 20)  # more than the pipe holds: the first writer waits with the lock
    got = bytearray()

    async def main() -> None:
        channel = StdioChannel(-1, wfd)

        async def drain() -> None:
            while got.count(b"\n") < 2:
                await anyio.wait_readable(rfd)
                got.extend(os.read(rfd, 1 << 16))

        async with anyio.create_task_group() as tg:
            tg.start_soon(channel.write_line, big)
            tg.start_soon(channel.write_line, b"small")
            tg.start_soon(drain)

    os.set_blocking(rfd, False)
    try:
        anyio.run(main)
    finally:
        os.close(rfd)
        os.close(wfd)
    assert bytes(got) == big + b"\nsmall\n"


def test_the_upstream_request_goes_to_a_waiting_writer_without_a_loop_pass() -> None:
    ran: list[str] = []

    async def main() -> None:
        send, receive = anyio.create_memory_object_stream[SessionMessage](0)
        direct = DirectCalls(send, 5.0)
        got: list[SessionMessage] = []

        async def writer() -> None:
            async with receive:
                async for item in receive:
                    got.append(item)

        async with send, anyio.create_task_group() as tg:
            tg.start_soon(writer)
            await anyio.wait_all_tasks_blocked()  # the writer waits in receive
            tg.start_soon(_note, ran)
            await direct._send(_request("warden-1"))
            assert ran == []  # handed over before the loop ran anything else
            await anyio.wait_all_tasks_blocked()
            assert [m.message.id for m in got] == ["warden-1"]
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_without_a_waiting_writer_the_request_waits_for_one() -> None:
    async def main() -> None:
        send, receive = anyio.create_memory_object_stream[SessionMessage](0)
        direct = DirectCalls(send, 5.0)
        got: list[SessionMessage] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(direct._send, _request("warden-2"))
            await anyio.wait_all_tasks_blocked()
            assert got == []
            got.append(await receive.receive())
        assert [m.message.id for m in got] == ["warden-2"]
        await send.aclose()
        await receive.aclose()

    anyio.run(main)
