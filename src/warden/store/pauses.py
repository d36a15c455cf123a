"""When background work may touch the database: in a pause between this process's
commits (decisions 1123, 331).

A WAL checkpoint or a transparency-log sync that runs while requests commit competes
with them for the disk, the other core and the GIL: it lengthened the requests it
overlapped. Each background loop therefore asks :meth:`WritePauses.delay` before it
works: a run that falls less than ``quiet`` seconds after a commit waits for a pause,
for at most one more ``interval`` after its previous run, so sustained writes delay it
but never starve it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator


class WritePauses:
    """``last_write()``: when this process last committed (``time.monotonic()`` seconds);
    ``quiet``: how long without a commit counts as a pause, in seconds."""

    def __init__(self, last_write: Callable[[], float], quiet: float = 0.02) -> None:
        self._last_write = last_write
        self._quiet = quiet

    def delay(self, done: float, interval: float) -> float:
        """Seconds to wait before asking again, or 0.0 to work now. ``done`` is when the
        previous run ended (``time.monotonic()``), ``interval`` the loop's period (s)."""
        now = time.monotonic()
        since = now - self._last_write()
        if since < self._quiet and now - done < 2 * interval:
            return max(self._quiet - since, 0.001)
        return 0.0


def paced(stop: threading.Event, interval: float, pauses: WritePauses | None) -> Iterator[None]:
    """A background loop's turns: yields once per ``interval`` seconds until ``stop`` is
    set. With ``pauses``, a turn that falls in a burst of this process's commits is put
    off (:meth:`WritePauses.delay`), measured from when the previous turn's work ended
    (the caller's body returning to this generator). The WAL checkpointer's and the
    transparency log's loop."""
    wait = interval
    done = time.monotonic()
    while not stop.wait(wait):
        wait = interval
        if pauses is not None:
            later = pauses.delay(done, interval)
            if later:
                wait = later
                continue
        yield
        done = time.monotonic()
