"""``StdioChannel.lines`` keeps its descriptor registered with the loop between waits
(decision 855): never while nobody waits once data arrived, never after the lines end."""

from __future__ import annotations

import asyncio
import os

import anyio

from warden.transport.stdio_channel import StdioChannel


def test_lines_arrive_and_no_registration_outlives_the_reader() -> None:
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        channel = StdioChannel(rfd, -1)
        got: list[bytes] = []

        async def read() -> None:
            async for line in channel.lines():
                got.append(line)
                if line == b"busy":
                    # Data arrives while the reader is busy: the callback that fires
                    # then finds nobody waiting and drops the registration.
                    os.write(wfd, b"during\n")
                    for _ in range(3):
                        await asyncio.sleep(0)
                    assert not loop.remove_reader(rfd)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            for chunk in (b"one\n", b"two\nthr", b"ee\n", b"busy\n"):
                await anyio.sleep(0.01)
                os.write(wfd, chunk)
            await anyio.sleep(0.05)
            os.close(wfd)
        assert got == [b"one", b"two", b"three", b"busy", b"during"]
        assert not loop.remove_reader(rfd)  # the ended reader left nothing registered

    try:
        anyio.run(main)
    finally:
        os.close(rfd)


def test_a_cancelled_reader_leaves_nothing_registered() -> None:
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        channel = StdioChannel(rfd, -1)

        async def read() -> None:
            async for _line in channel.lines():
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            os.write(wfd, b"x\n")
            await anyio.sleep(0.05)  # the reader waits, registered
            tg.cancel_scope.cancel()
        assert not loop.remove_reader(rfd)

    try:
        anyio.run(main)
    finally:
        os.close(rfd)
        os.close(wfd)
