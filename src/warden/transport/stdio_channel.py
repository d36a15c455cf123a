"""The proxy's stdin/stdout as non-blocking pipes on the event loop (no worker threads).

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: every line
in, every write and every flush is a hop to a worker thread and back (about 50 µs
each on a busy two-core machine, three per call). Here the descriptors are read
and written directly when the event loop says they are ready.

As the SDK does, the channel claims fds 0 and 1 while it serves: it keeps private
duplicates for the MCP channel and points fd 0 at the null device and fd 1 at
stderr, so the real server and stray prints never touch the channel; both are
restored on exit (docs/decisions.md 650).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio

#: Bytes read per ``read(2)``.
_CHUNK = 1 << 16


def _streamable(fd: int) -> bool:
    """A pipe, socket or character device: what the event loop can watch."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


class StdioChannel:
    """Lines in from ``rfd``, lines out to ``wfd``; both non-blocking. One reader task;
    writers are serialised so that every line leaves whole."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        # A free lock is taken without yielding to the event loop first (anyio's default
        # lock checkpoints once before an uncontended acquire: one more loop pass before
        # every answer, decision 720); a writer that must wait for the pipe still yields
        # while it holds the lock. asyncio's own lock does that at less cost than
        # anyio's ``Lock(fast_acquire=True)`` (decision 855).
        self._write_lock = asyncio.Lock()

    async def lines(self) -> AsyncIterator[bytes]:
        """Each line (without its newline) until end of input; a last unterminated
        line is yielded too."""
        buf = bytearray()
        drained = False
        readable = _Readable(self.rfd)
        try:
            while True:
                if drained:
                    # The last read took less than was asked for: the pipe was empty
                    # then, so wait for it rather than pay a read that fails (and its
                    # exception).
                    await readable.wait()
                try:
                    chunk = os.read(self.rfd, _CHUNK)
                except BlockingIOError:
                    drained = True
                    continue
                drained = len(chunk) < _CHUNK
                if not chunk:
                    if buf:
                        yield bytes(buf)
                    return
                buf += chunk
                start = 0
                while (end := buf.find(b"\n", start)) >= 0:
                    yield bytes(buf[start:end])
                    start = end + 1
                del buf[:start]
        finally:
            readable.close()

    async def write_line(self, data: bytes) -> None:
        """Write ``data`` and a newline, all of it, before any other line."""
        view = memoryview(data + b"\n")
        async with self._write_lock:
            while view:
                try:
                    view = view[os.write(self.wfd, view) :]
                except BlockingIOError:
                    await anyio.wait_writable(self.wfd)


class _Readable:
    """Waits for ``fd`` to be readable, its event-loop registration kept between waits.

    ``anyio.wait_readable`` registers the descriptor with the loop's selector before
    each wait and removes it after (two ``epoll_ctl`` calls and the selector's
    bookkeeping, twice per proxied call: the client's line and the server's answer).
    Here the reader callback stays registered while lines are read and answered; it is
    removed only when it fires with nobody waiting (data arrived while the reader was
    busy: the next wait registers it again), so a busy reader never spins the loop, and
    when the lines end. Where the loop cannot watch the descriptor itself (Windows'
    proactor), ``anyio.wait_readable`` is used (decision 855)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.registered = False
        self.native = True

    def _ready(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            self._unregister()
        else:
            waiter.set_result(None)

    def _unregister(self) -> None:
        if self.registered and self.loop is not None:
            self.registered = False
            self.loop.remove_reader(self.fd)

    async def wait(self) -> None:
        if not self.native:
            await anyio.wait_readable(self.fd)
            return
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if not self.registered:
            try:
                self.loop.add_reader(self.fd, self._ready)
            except NotImplementedError:
                self.native = False
                await anyio.wait_readable(self.fd)
                return
            self.registered = True
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        self._unregister()


@contextmanager
def claim_stdio() -> Iterator[StdioChannel | None]:
    """A :class:`StdioChannel` on private duplicates of fds 0 and 1 (diverted while it
    serves), or None when either is not something the loop can watch (a regular
    file): the caller then uses the SDK's threaded transport."""
    if not (_streamable(0) and _streamable(1)):
        yield None
        return
    rfd = os.dup(0)
    wfd = os.dup(1)
    blocking = (os.get_blocking(rfd), os.get_blocking(wfd))
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        yield StdioChannel(rfd, wfd)
    finally:
        os.close(null)
        # The descriptions are shared with whoever started us (a terminal): leave
        # them as they were found.
        os.set_blocking(rfd, blocking[0])
        os.set_blocking(wfd, blocking[1])
        os.dup2(rfd, 0)
        os.dup2(wfd, 1)
        os.close(rfd)
        os.close(wfd)
