"""``StdioChannel.lines(take)``: the loop's reader callback offers each complete line to
``take`` while the reader waits (decision 1110). A line taken is never yielded and the
reader is not woken for it; the first line not taken, and everything after it, reach
the reader in order, exactly as without ``take``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anyio
import pytest

from warden.transport import stdio_channel as sc
from warden.transport.stdio_channel import Ahead, StdioChannel, TooLong


def _run(
    chunks: list[bytes], take_if: set[bytes], *, max_line: int = 1 << 20
) -> tuple[list[bytes | TooLong], list[bytes], int]:
    """Write ``chunks`` one at a time (the reader waiting between them); the lines
    yielded, the lines taken, and how many times the reader resumed with a line."""
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    got: list[bytes | TooLong] = []
    taken: list[bytes] = []
    resumed = [0]

    def take(line: bytes) -> bool:
        if line in take_if:
            taken.append(line)
            return True
        return False

    async def main() -> None:
        channel = StdioChannel(rfd, -1, max_line)

        async def read() -> None:
            async for line in channel.lines(take):
                resumed[0] += 1
                got.append(line)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            for chunk in chunks:
                await anyio.sleep(0.02)
                os.write(wfd, chunk)
            await anyio.sleep(0.05)
            os.close(wfd)

    try:
        anyio.run(main)
    finally:
        os.close(rfd)
    return got, taken, resumed[0]


def test_taken_lines_never_reach_the_reader() -> None:
    got, taken, resumed = _run([b"a\n", b"b\nc\n", b"d\n"], {b"a", b"b", b"c", b"d"})
    assert taken == [b"a", b"b", b"c", b"d"]
    assert got == [] and resumed == 0


def test_a_line_not_taken_and_every_line_after_it_reach_the_reader_in_order() -> None:
    # "x" is not taken: "y" behind it in the same read is yielded too, not taken out of
    # turn; once the reader waits again, "z" is offered to take.
    got, taken, _ = _run([b"a\n", b"x\ny\n", b"z\n"], {b"a", b"y", b"z"})
    assert taken == [b"a", b"z"]
    assert got == [b"x", b"y"]


def test_partial_lines_over_long_lines_and_the_last_line_are_handled_as_before() -> None:
    # A line split over two reads is offered whole; an over-long line always reaches the
    # reader; the last, unterminated line is offered like any other.
    got, taken, _ = _run(
        [b"ta", b"ke\n", b"0123456789abc\nnot\n", b"take\n", b"tail"],
        {b"take", b"tail", b"not"},
        max_line=8,
    )
    assert taken == [b"take", b"take", b"tail"]
    assert len(got) == 2 and isinstance(got[0], TooLong) and got[0].size == 13
    assert got[1] == b"not"  # behind the over-long line in its read: yielded, in turn


def test_what_take_raises_is_raised_by_the_lines() -> None:
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)

    def take(line: bytes) -> bool:
        raise RuntimeError(f"refused {line!r}")

    async def main() -> None:
        channel = StdioChannel(rfd, -1)

        async def read() -> None:
            async for _line in channel.lines(take):
                raise AssertionError("no line is yielded past the failure")

        with pytest.raises(BaseExceptionGroup) as caught:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.sleep(0.02)
                os.write(wfd, b"boom\n")
                await anyio.sleep(1)
        assert caught.group_contains(RuntimeError, match="refused b'boom'")
        assert not asyncio.get_running_loop().remove_reader(rfd)

    try:
        anyio.run(main)
    finally:
        os.close(rfd)
        os.close(wfd)


def test_a_taken_line_costs_the_waiting_reader_no_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # The reader's wait is never resolved while every line is taken: had the callback
    # woken it, it would have resumed (and read nothing) at least once per chunk.
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    waits: list[str] = []
    taken: list[bytes] = []
    original = sc._Readable.wait

    async def counting(self: sc._Readable) -> bool:
        waits.append("wait")
        woken = await original(self)
        waits.append("woken")
        return woken

    async def main() -> None:
        channel = StdioChannel(rfd, -1)

        async def read() -> None:
            async for _line in channel.lines(lambda line: taken.append(line) is None):
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            for _ in range(5):
                await anyio.sleep(0.01)
                os.write(wfd, b"line\n")
            await anyio.sleep(0.02)
            assert waits == ["wait"]  # one wait, never resolved while lines are taken
            os.close(wfd)

    monkeypatch.setattr(sc._Readable, "wait", counting)
    try:
        anyio.run(main)
    finally:
        os.close(rfd)
    assert taken == [b"line"] * 5
    assert waits == ["wait", "woken"]  # woken once: by the end of input


def test_ahead_gives_back_only_what_was_kept_for_that_very_line() -> None:
    ahead: Ahead[str] = Ahead()
    line = b"x" * 3
    assert ahead.keep(line, "kept") == "kept"
    assert ahead.get(bytes(bytearray(line)), lambda _b: "made") == "made"  # equal, not same
    ahead.keep(line, "kept")
    assert ahead.get(line, lambda _b: "made") == "kept"
    assert ahead.get(line, lambda _b: "made") == "made"  # forgotten once given


def test_a_regular_file_is_read_to_its_end_without_take(tmp_path: Path) -> None:
    """Decision 1200: a channel on a regular file (``watch=False``) reads it without
    waiting for readiness (the loop cannot watch a file), offers no line to ``take``,
    and yields every line, an over-long one as :class:`TooLong`, then ends; a write to a
    file never waits either."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"one\n" + b"x" * 3000 + b"\ntwo\nlast")
    out = tmp_path / "out.jsonl"
    offered: list[bytes] = []

    def take(line: bytes) -> bool:
        offered.append(line)
        return True

    async def main() -> list[bytes | TooLong]:
        with source.open("rb") as rf, out.open("wb") as wf:
            channel = StdioChannel(rf.fileno(), wf.fileno(), 1024, watch=False)
            got = [line async for line in channel.lines(take)]
            await channel.write_line(b"answer")
        return got

    got = anyio.run(main)
    assert offered == []
    assert got[0] == b"one" and got[2:] == [b"two", b"last"]
    assert isinstance(got[1], TooLong) and got[1].size == 3000
    assert out.read_bytes() == b"answer\n"
