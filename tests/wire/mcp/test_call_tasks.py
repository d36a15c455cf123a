"""The fast path's calls in flight without anyio per call (decision 960), and one timer
for every upstream deadline (decision 961): a cancelled call stops where an anyio cancel
scope would have stopped it, nothing is cancelled once its governed part is over, a
call's failure stops the serving, and each upstream call times out at its own deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from test_direct_calls import OK, answer, run

from warden.transport.call_tasks import CallCancel, Calls


def test_a_call_cancelled_before_it_runs_stops_at_its_first_suspension() -> None:
    steps: list[str] = []

    async def call(handle: CallCancel) -> None:
        with handle:
            steps.append("decided")  # the synchronous part runs, as under an anyio scope
            await asyncio.sleep(0)
            steps.append("forwarded")

    async def main() -> None:
        handle = CallCancel()
        handle.cancel()
        task = asyncio.get_running_loop().create_task(call(handle))
        with pytest.raises(asyncio.CancelledError):
            await task
        assert handle.called

    asyncio.run(main())
    assert steps == ["decided"]


def test_a_call_cancelled_while_it_waits_is_cancelled_there_and_only_once() -> None:
    seen: list[str] = []

    async def call(handle: CallCancel, waiting: asyncio.Event) -> None:
        try:
            with handle:
                waiting.set()
                await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            # The courtesy cancel upstream still gets to run (no second cancellation).
            await asyncio.sleep(0)
            seen.append("cleaned up")
            raise

    async def main() -> None:
        handle, waiting = CallCancel(), asyncio.Event()
        task = asyncio.get_running_loop().create_task(call(handle, waiting))
        await waiting.wait()
        handle.cancel()
        handle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled", "cleaned up"]


def test_nothing_is_cancelled_after_the_governed_part() -> None:
    async def call(handle: CallCancel, done: asyncio.Event) -> str:
        with handle:
            pass
        done.set()
        await asyncio.sleep(0.05)  # the answer's write, never cut short
        return "written" if not handle.called else "not answered"

    async def main() -> None:
        handle, done = CallCancel(), asyncio.Event()
        task = asyncio.get_running_loop().create_task(call(handle, done))
        await done.wait()
        handle.cancel()
        assert await task == "not answered"

    asyncio.run(main())


def test_calls_are_tracked_until_they_end_and_a_failure_stops_the_serving() -> None:
    async def main() -> None:
        calls = Calls()
        release = asyncio.Event()

        async def ok() -> None:
            await release.wait()

        async def broken() -> None:
            await release.wait()
            raise RuntimeError("escaped the call's own mapping")

        with anyio.CancelScope() as scope:
            calls.scope = scope
            calls.start(ok())
            calls.start(broken())
            await asyncio.sleep(0)
            assert len(calls.tasks) == 2
            release.set()
            await calls.drain()
            assert calls.tasks == set()
            await asyncio.sleep(1)  # cancelled by the failure
        assert scope.cancelled_caught
        assert isinstance(calls.failure, RuntimeError)

    asyncio.run(main())


def test_calls_still_running_are_cancelled_and_awaited() -> None:
    ended: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("slow")

    async def main() -> None:
        calls = Calls()
        calls.start(slow())
        await asyncio.sleep(0)
        await calls.cancel()
        assert calls.tasks == set()
        assert calls.failure is None

    asyncio.run(main())
    assert ended == ["slow"]


def test_each_upstream_call_times_out_at_its_own_deadline() -> None:
    timeout = 0.4
    elapsed: dict[str, float] = {}

    async def body(direct: Any, _s: Any, upstream: Any, from_up: Any, *_: Any) -> None:
        loop = asyncio.get_running_loop()

        async def call(name: str) -> None:
            started = loop.time()
            with pytest.raises(MCPError) as caught:
                await direct.call_tool(name, {})
            assert caught.value.error.code == types.REQUEST_TIMEOUT
            elapsed[name] = loop.time() - started

        async def answered() -> None:
            sent = (await upstream.receive()).message
            await from_up.send(answer(sent.id, OK))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answered)
            # The first call sets the one timer; it is answered, and the calls after it
            # must still time out at their own deadlines, never at an earlier one.
            result = await direct.call_tool("quick", {})
            assert result.content[0].text == "12:00"
            tg.start_soon(call, "first")
            await anyio.sleep(0.15)
            tg.start_soon(call, "second")

    run(body, timeout_s=timeout)
    assert set(elapsed) == {"first", "second"}
    for name, took in elapsed.items():
        assert timeout <= took < timeout + 1.0, (name, took)
