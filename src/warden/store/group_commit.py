"""Group commit: many concurrent appends, one durable transaction, one fsync.

With ``synchronous=FULL`` every commit waits for the disk; committing the
appends of concurrent requests together amortises that wait without weakening
it: each request's response is released only after the transaction holding
its entry is durable. Items fail individually (a replay, a lost head race)
through per-item savepoints (:meth:`Store.append_many`).

The appends one pass of the event loop stages are handed to the writer thread
together, at the end of that pass (``loop.call_soon``): the writer wakes once per
pass instead of once per request, takes them in one transaction, and does not
contend for the GIL with the loop while the loop is still deciding the pass's
other requests. Their outcomes go back to the loop in one callback per batch.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeAlias

from warden.errors import StoreUnavailable
from warden.store.base import PendingAppend, Store

log = logging.getLogger(__name__)

_Future: TypeAlias = "asyncio.Future[Exception | None]"
_Item: TypeAlias = tuple[PendingAppend, asyncio.AbstractEventLoop, _Future]


class GroupCommitter:
    """A writer thread that commits queued appends in batches of up to ``max_batch``."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 256,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        """``on_batch(size, seconds)`` hears of every committed batch: its number of
        entries and the wall time of its durable transaction (commit and fsync)."""
        self._store = store
        self._max = max_batch
        self._on_batch = on_batch
        self._queue: queue.SimpleQueue[list[_Item] | None] = queue.SimpleQueue()
        # Appends staged in the current pass of each event loop, not yet handed over.
        self._staged: dict[asyncio.AbstractEventLoop, list[_Item]] = {}
        self._thread = threading.Thread(target=self._run, name="warden-group-commit", daemon=True)
        self._thread.start()

    async def commit(self, pending: PendingAppend) -> None:
        """Commit ``pending``; return once it is durable, or raise its error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Exception | None] = loop.create_future()
        staged = self._staged.get(loop)
        if staged is None:
            staged = self._staged[loop] = []
            loop.call_soon(self._hand_over, loop)
        staged.append((pending, loop, future))
        error = await future
        if error is not None:
            raise error

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """End of a loop pass: give the writer what the pass staged, in one queue put."""
        staged = self._staged.pop(loop, None)
        if staged:
            self._queue.put(staged)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            pending = list(first)
            stop = False
            while len(pending) < self._max:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                pending.extend(nxt)
            for i in range(0, len(pending), self._max):
                self._commit(pending[i : i + self._max])
            if stop:
                return

    def _commit(self, batch: list[_Item]) -> None:
        """One durable transaction for ``batch``; every waiter hears its own outcome."""
        began = time.perf_counter()
        try:
            outcomes: list[Exception | None] = self._store.append_many([b[0] for b in batch])
        except Exception as exc:  # noqa: BLE001 - every waiter must hear of it
            log.error("group commit failed: %r", exc)
            failure = (
                exc
                if isinstance(exc, StoreUnavailable)
                else StoreUnavailable(f"store error: {exc!r}")
            )
            outcomes = [failure] * len(batch)
        else:
            self._observe(len(batch), time.perf_counter() - began)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Future, Exception | None]]] = {}
        for (_, loop, future), outcome in zip(batch, outcomes, strict=True):
            by_loop.setdefault(loop, []).append((future, outcome))
        for loop, results in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve_all, results)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                log.warning("group commit: %d outcome(s) for a closed event loop", len(results))

    def _observe(self, size: int, seconds: float) -> None:
        if self._on_batch is None:
            return
        try:
            self._on_batch(size, seconds)
        except Exception:  # noqa: BLE001 - metrics never fail a commit
            log.warning("group commit observer failed", exc_info=True)

    def close(self) -> None:
        """Commit what is queued, then stop the writer thread. Call it on the event
        loop's thread (or once no loop stages appends any more)."""
        for loop in list(self._staged):
            self._hand_over(loop)  # staged in this pass: committed before the stop
        self._queue.put(None)
        self._thread.join(timeout=30)


def _resolve_all(results: list[tuple[_Future, Exception | None]]) -> None:
    for future, outcome in results:
        if not future.done():
            future.set_result(outcome)
