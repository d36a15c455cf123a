"""The drivers of a wire's decision flow (issue 16: wires only parse and render).

A wire's dispatch is written once as a generator (a *flow*, e.g.
``wire/acs/service.py`` ``AcsService._flow``). It yields what it needs done and receives
the outcome:

- a :class:`SessionLock`: the driver serialises the rest of the flow with every other
  step of that session (held until the flow returns);
- an :class:`~warden.core.pipeline.Offload`: blocking store work; the driver runs it
  (on a worker thread under an event loop) and sends its value, or throws its error in;
- anything else is a staged append: the driver commits it and sends ``None``, or the
  :class:`~warden.errors.WardenError` that refused it.

The flow's return value is the answer. :func:`drive` runs a flow on the calling thread,
:func:`drive_async` on an event loop; both hold their session lock until the flow ends.
Exceptions other than a refused commit propagate to the caller (the wire turns them
into its "internal error" answer). The core imports nothing above ``policy/``: the
locks and the commit are the caller's callables.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from warden.core.pipeline import Offload
from warden.errors import WardenError

R = TypeVar("R")


@dataclass(frozen=True)
class SessionLock:
    """Yielded by a flow before it reads a session: the driver serialises the steps of
    one session (held until the answer is ready), so concurrent calls on one session
    queue instead of racing for its head."""

    session_id: str


class SessionLocks:
    """The locks :func:`drive` and :func:`drive_async` serialise a session's steps with:
    a stripe of 64 thread locks (:meth:`thread`) and one asyncio lock per session while
    a request holds it (:meth:`loop`; dropped when none does)."""

    def __init__(self, stripes: int = 64) -> None:
        self._threads = [threading.Lock() for _ in range(stripes)]
        self._loop: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def thread(self, session_id: str) -> threading.Lock:
        return self._threads[hash(session_id) % len(self._threads)]

    def loop(self, session_id: str) -> asyncio.Lock:
        lock = self._loop.get(session_id)
        if lock is None:
            lock = asyncio.Lock()
            self._loop[session_id] = lock
        return lock


def drive(
    flow: Generator[Any, Any, R],
    *,
    lock_for: Callable[[str], threading.Lock],
    commit: Callable[[Any], None],
) -> R:
    """Run ``flow`` to its answer on this thread: ``commit(item)`` for each staged
    append (its WardenError is sent back into the flow), ``lock_for(session_id)`` for
    a :class:`SessionLock`. Raises whatever the flow raises."""
    held: threading.Lock | None = None
    try:
        item = next(flow)
        while True:
            outcome: Exception | None = None
            if isinstance(item, Offload):
                try:
                    value = item.run()
                except Exception as exc:  # noqa: BLE001 - the flow decides what it means
                    item = flow.throw(exc)
                else:
                    item = flow.send(value)
                continue
            if isinstance(item, SessionLock):
                held = lock_for(item.session_id)
                held.acquire()
            else:
                try:
                    commit(item)
                except WardenError as exc:
                    outcome = exc
            item = flow.send(outcome)
    except StopIteration as done:
        answer: R = done.value
        return answer
    finally:
        if held is not None:
            held.release()


async def drive_async(
    flow: Generator[Any, Any, R],
    *,
    lock_for: Callable[[str], asyncio.Lock],
    commit: Callable[[Any], Awaitable[None]],
) -> R:
    """:func:`drive` on an event loop: offloaded work runs on a worker thread
    (``asyncio.to_thread``), ``await commit(item)`` commits (e.g. a group committer:
    the append is durable when it returns) and the session lock is an asyncio lock."""
    held: asyncio.Lock | None = None
    try:
        item = next(flow)
        while True:
            outcome: Exception | None = None
            if isinstance(item, Offload):
                try:
                    value = await asyncio.to_thread(item.run)
                except Exception as exc:  # noqa: BLE001 - the flow decides what it means
                    item = flow.throw(exc)
                else:
                    item = flow.send(value)
                continue
            if isinstance(item, SessionLock):
                held = lock_for(item.session_id)
                await held.acquire()
            else:
                try:
                    await commit(item)
                except WardenError as exc:
                    outcome = exc
            item = flow.send(outcome)
    except StopIteration as done:
        answer: R = done.value
        return answer
    finally:
        if held is not None:
            held.release()
