"""Group commit: many concurrent appends, one durable transaction, one fsync.

With ``synchronous=FULL`` every commit waits for the disk; committing the
appends of concurrent requests together amortises that wait without weakening
it: each request's response is released only after the transaction holding
its entry is durable. Items fail individually (a replay, a lost head race)
through per-item savepoints (:meth:`Store.append_many`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable

from warden.errors import StoreUnavailable
from warden.store.base import PendingAppend, Store

log = logging.getLogger(__name__)

_Item = tuple[PendingAppend, asyncio.AbstractEventLoop, "asyncio.Future[Exception | None]"]


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
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="warden-group-commit", daemon=True)
        self._thread.start()

    async def commit(self, pending: PendingAppend) -> None:
        """Commit ``pending``; return once it is durable, or raise its error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Exception | None] = loop.create_future()
        self._queue.put((pending, loop, future))
        error = await future
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self._max:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
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
            for (_, loop, future), outcome in zip(batch, outcomes, strict=True):
                loop.call_soon_threadsafe(_resolve, future, outcome)
            if stop:
                return

    def _observe(self, size: int, seconds: float) -> None:
        if self._on_batch is None:
            return
        try:
            self._on_batch(size, seconds)
        except Exception:  # noqa: BLE001 - metrics never fail a commit
            log.warning("group commit observer failed", exc_info=True)

    def close(self) -> None:
        """Commit what is queued, then stop the writer thread."""
        self._queue.put(None)
        self._thread.join(timeout=30)


def _resolve(future: asyncio.Future[Exception | None], outcome: Exception | None) -> None:
    if not future.done():
        future.set_result(outcome)
