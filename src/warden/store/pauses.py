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

import time
from collections.abc import Callable


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
