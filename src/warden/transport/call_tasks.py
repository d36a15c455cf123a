"""The MCP proxy fast path's ``tools/call`` in flight: one bare asyncio task per call,
and the handle a client's ``notifications/cancelled`` cancels it by.

Moved out of :mod:`warden.wire.mcp.fast_path` (task bookkeeping is not parsing or
rendering). What an anyio task group and a cancel scope per call gave is kept, at
less cost per call (docs/decisions.md 854, 960):

- serving does not end before every call has answered (:meth:`Calls.drain`), a call
  still running when serving stops is cancelled and awaited (:meth:`Calls.cancel`),
  and a call that fails past its own mapping of exceptions stops the serving
  (``scope``) and is raised from it (:attr:`Calls.failure`);
- a cancelled call stops at its next suspension, as under an anyio cancel scope: one
  cancelled before it ran runs up to its first suspension and is cancelled there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

import anyio


class Calls:
    """The fast path's calls in flight, each a bare asyncio task.

    An anyio task group's ``start_soon`` costs ≈ 20 µs a task more than the loop's
    ``create_task`` (decision 854). The bookkeeping runs inside the task when its call
    ends, not in a done callback: a callback is one more event-loop pass per call
    (decision 960)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        #: The first exception a call raised past its own mapping (None: none did).
        self.failure: BaseException | None = None
        #: Cancelled on such a failure, to stop the serving.
        self.scope: anyio.CancelScope | None = None

    def start(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` (one call) as a task of its own, starting on the loop's next pass."""
        self.tasks.add(asyncio.get_running_loop().create_task(self._run(coro)))

    async def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except Exception as exc:  # noqa: BLE001 - kept and raised from the serving
            if self.failure is None:
                self.failure = exc
                if self.scope is not None:
                    self.scope.cancel()
        finally:
            self.tasks.discard(asyncio.current_task())

    async def drain(self) -> None:
        """Wait until every call in flight has ended."""
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    async def cancel(self) -> None:
        """Cancel every call in flight and wait for them (shielded)."""
        if not self.tasks:
            return
        for task in self.tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait(set(self.tasks))


class CallCancel:
    """What a client's ``notifications/cancelled`` cancels: the governed part of one call
    (``with handle:`` around it), in place of an anyio ``CancelScope`` per call.

    :meth:`cancel` cancels the task inside the ``with`` block, which raises
    ``CancelledError`` at its next suspension (an upstream call then sends its courtesy
    cancel, as before); called before the block is entered, the block's task is
    cancelled on entry, so it runs up to its first suspension and stops there, as an
    anyio scope cancelled before entry delivers its cancellation. After the block
    nothing is cancelled (the answer's write is never cut short): the caller reads
    :attr:`called` and does not answer. The cancellation is not swallowed at the end
    of the block: the call's task ends cancelled, which :class:`Calls` ignores."""

    __slots__ = ("called", "_task")

    def __init__(self) -> None:
        #: Whether :meth:`cancel` was called (the call must not be answered).
        self.called = False
        self._task: asyncio.Task[Any] | None = None

    def cancel(self) -> None:
        if self.called:
            return
        self.called = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> CallCancel:
        task = asyncio.current_task()
        self._task = task
        if self.called and task is not None:
            task.cancel()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._task = None
