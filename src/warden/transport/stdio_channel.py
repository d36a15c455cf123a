"""The proxy's stdin/stdout as non-blocking pipes on the event loop (no worker threads).

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: every line
in, every write and every flush is a hop to a worker thread and back (about 50 µs
each on a busy two-core machine, three per call). Here the descriptors are read
and written directly when the event loop says they are ready.

As the SDK does, the channel claims fds 0 and 1 while it serves: it keeps private
duplicates for the MCP channel and points fd 0 at the null device and fd 1 at
stderr, so the real server and stray prints never touch the channel; both are
restored on exit (docs/decisions.md 650).

Stdin that the loop cannot watch (a regular file: ``warden mcp-proxy < lines.jsonl``)
is read the same way without waiting for readiness (a read of a file never blocks on a
peer), so every client line takes the same strict path (docs/decisions.md 1200).

A line longer than the channel's limit is never held whole: past the limit its bytes
are counted and dropped as they arrive, and the reader gets a :class:`TooLong` in
its place (docs/decisions.md 900).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")

#: Bytes read per ``read(2)``.
_CHUNK = 1 << 16

#: The longest line a channel reads by default (``warden mcp-proxy --max-line-bytes``).
MAX_LINE = 4 << 20

#: Bytes kept of each end of an over-long line (where a JSON-RPC id is written).
_KEEP = 256


@dataclass(frozen=True)
class TooLong:
    """A line of ``size`` bytes (more than the channel's ``limit``), discarded as it was
    read but for its first and last :data:`_KEEP` bytes."""

    size: int
    limit: int
    head: bytes
    tail: bytes


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

    def __init__(self, rfd: int, wfd: int, max_line: int = MAX_LINE, *, watch: bool = True) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.max_line = max_line
        #: Whether the loop watches ``rfd`` (False: a regular file, read until its end
        #: without waiting; no line is offered to a ``take``).
        self.watch = watch
        # A free lock is taken without yielding to the event loop first (anyio's default
        # lock checkpoints once before an uncontended acquire: one more loop pass before
        # every answer, decision 720); a writer that must wait for the pipe still yields
        # while it holds the lock. asyncio's own lock does that at less cost than
        # anyio's ``Lock(fast_acquire=True)`` (decision 855).
        self._write_lock = asyncio.Lock()

    async def lines(self, take: Take | None = None) -> AsyncIterator[bytes | TooLong]:
        """Each line (without its newline) until end of input; a last unterminated
        line is yielded too. A line longer than ``max_line`` is a :class:`TooLong`.

        ``take``: while the reader waits for input, the loop's reader callback reads the
        pipe itself and offers each complete line to ``take`` in order; a line it takes
        (True) is done and never yielded, so a reader that takes what arrives is not
        woken at all (one event-loop pass fewer per line, decision 1110). The first line
        it does not take (False, having done nothing), an over-long line, the end of
        input, and every line after them are yielded as without ``take``, in order; an
        exception ``take`` raises is raised here. Without a callback-capable loop every
        line is yielded."""
        take = take if self.watch else None
        state = _Lines(self.rfd, self.max_line, take)
        readable = _Readable(self.rfd, state.on_ready if take is not None else None)
        queue = state.queue
        try:
            while True:
                if state.error is not None:
                    raise state.error
                if queue:
                    yield queue.popleft()
                    continue
                if state.eof:
                    return
                # The last read took less than was asked for: the pipe was empty then, so
                # wait for it rather than pay a read that fails (and its exception). The
                # callback may read (and take) meanwhile; it wakes this reader only with
                # something left for it.
                if state.drained and self.watch and await readable.wait():
                    continue
                state.fill()
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


class _Skipped:
    """The size, head and tail of an over-long line while the rest of it is dropped."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.tail = b""
        self.size = 0

    def add(self, data: bytes | bytearray) -> None:
        self.size += len(data)
        self.tail = (self.tail + data[-_KEEP:])[-_KEEP:]

    def done(self, limit: int) -> TooLong:
        return TooLong(self.size, limit, self.head, self.tail)


def _whole(line: bytes | bytearray, limit: int) -> TooLong:
    return TooLong(len(line), limit, bytes(line[:_KEEP]), bytes(line[-_KEEP:]))


#: Offered each complete line by the loop's reader callback (:meth:`StdioChannel.lines`):
#: True when it handled the line, False (having done nothing) to have it yielded.
Take = Callable[[bytes], bool]


class Ahead(Generic[T]):
    """What a ``take`` made of the last line it was offered (its parse), so that the
    reader the line is yielded to, if it was not taken, does not make it again."""

    __slots__ = ("line", "item")

    def __init__(self) -> None:
        self.line: bytes | None = None
        self.item: T | None = None

    def keep(self, line: bytes, item: T) -> T:
        """Keep ``item`` for ``line``; returns ``item``."""
        self.line, self.item = line, item
        return item

    def get(self, line: bytes, make: Callable[[bytes], T]) -> T:
        """The item kept for this very line (the same object), else ``make(line)``.
        Either way nothing stays kept."""
        item = self.item if self.line is line else None
        self.line = self.item = None
        return make(line) if item is None else item


class _Lines:
    """What one :meth:`StdioChannel.lines` has read: the partial line, the complete lines
    not yet yielded, the over-long line being dropped, and whether input ended."""

    def __init__(self, rfd: int, limit: int, take: Take | None) -> None:
        self.rfd = rfd
        self.limit = limit
        self.take = take
        self.buf = bytearray()
        self.queue: deque[bytes | TooLong] = deque()
        self.skipped: _Skipped | None = None
        self.drained = False
        self.eof = False
        self.error: BaseException | None = None

    def fill(self) -> bool:
        """One ``read(2)``: its complete lines queued. False when the pipe was empty."""
        try:
            chunk = os.read(self.rfd, _CHUNK)
        except BlockingIOError:
            self.drained = True
            return False
        self.drained = len(chunk) < _CHUNK
        limit, buf, queue = self.limit, self.buf, self.queue
        if not chunk:
            self.eof = True
            if self.skipped is not None:
                queue.append(self.skipped.done(limit))
                self.skipped = None
            elif buf:
                queue.append(bytes(buf) if len(buf) <= limit else _whole(buf, limit))
                buf.clear()
            return True
        if self.skipped is not None:
            end = chunk.find(b"\n")
            self.skipped.add(chunk if end < 0 else chunk[:end])
            if end < 0:
                return True
            queue.append(self.skipped.done(limit))
            self.skipped = None
            chunk = chunk[end + 1 :]
        buf += chunk
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            if end - start > limit:
                queue.append(_whole(buf[start:end], limit))
            else:
                queue.append(bytes(buf[start:end]))
            start = end + 1
        del buf[:start]
        if len(buf) > limit:
            self.skipped = _Skipped(bytes(buf[:_KEEP]))
            self.skipped.add(buf)
            buf.clear()
        return True

    def on_ready(self) -> bool:
        """The reader callback, while the reader waits with nothing queued: read, offer
        each complete line to ``take`` in order; True to wake the reader (a line not
        taken, an over-long one, the end of input, a failure, or more to read)."""
        take, queue = self.take, self.queue
        assert take is not None
        try:
            if not self.fill():
                return False
            while queue:
                line = queue[0]
                if not isinstance(line, bytes) or not take(line):
                    return True
                queue.popleft()
        except Exception as exc:  # noqa: BLE001 - raised in the reader, where it belongs
            self.error = exc
            return True
        return self.eof or not self.drained


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

    def __init__(self, fd: int, on_ready: Callable[[], bool] | None = None) -> None:
        self.fd = fd
        #: Run by the callback while a reader waits: True to wake it (decision 1110).
        self.on_ready = on_ready
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiter: asyncio.Future[bool] | None = None
        self.registered = False
        self.native = True

    def _ready(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            self._unregister()
        elif self.on_ready is None:
            waiter.set_result(False)
        elif self.on_ready():
            waiter.set_result(True)

    def _unregister(self) -> None:
        if self.registered and self.loop is not None:
            self.registered = False
            self.loop.remove_reader(self.fd)

    async def wait(self) -> bool:
        """Wait until ``fd`` is readable; True when ``on_ready`` has read it meanwhile."""
        if not self.native:
            await anyio.wait_readable(self.fd)
            return False
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if not self.registered:
            try:
                self.loop.add_reader(self.fd, self._ready)
            except NotImplementedError:
                self.native = False
                await anyio.wait_readable(self.fd)
                return False
            self.registered = True
        self.waiter = self.loop.create_future()
        try:
            return await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        self._unregister()


@contextmanager
def claim_stdio(max_line: int = MAX_LINE) -> Iterator[StdioChannel]:
    """A :class:`StdioChannel` on private duplicates of fds 0 and 1 (diverted while it
    serves). A stdin the loop cannot watch (a regular file) is read without waiting,
    and a stdout it cannot watch never makes a write wait (decision 1200)."""
    watch = _streamable(0)
    rfd = os.dup(0)
    wfd = os.dup(1)
    blocking = (os.get_blocking(rfd), os.get_blocking(wfd))
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        yield StdioChannel(rfd, wfd, max_line, watch=watch)
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
