"""The transparency log's checkpoint worker reads and hashes new leaves in a pause of
this process's writes, within a bound of one more tick (decisions 331 and 1123), as the
WAL checkpointer does (tests/store/test_checkpoint_pause.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from warden.store.pauses import WritePauses
from warden.tlog.service import CheckpointWorker


class _Log:
    """Counts the worker's ``maybe_checkpoint`` calls and how often ``last_write`` was
    asked before the first."""

    def __init__(self) -> None:
        self.ran = threading.Event()
        self.asked_before_first: int | None = None
        self.asked = 0

    def maybe_checkpoint(self) -> Any:
        if self.asked_before_first is None:
            self.asked_before_first = self.asked
        self.ran.set()
        return None


def _first_run(last_write: Callable[[], float], tick: float) -> tuple[float, int]:
    """Start a worker; the seconds until its first sync and the questions asked by then."""
    log = _Log()

    def probe() -> float:
        log.asked += 1
        return last_write()

    started = time.monotonic()
    worker = CheckpointWorker(log, tick_s=tick, last_write=probe)  # type: ignore[arg-type]
    try:
        assert log.ran.wait(30), "the worker never synced"
        assert log.asked_before_first is not None
        return time.monotonic() - started, log.asked_before_first
    finally:
        worker._stop.set()
        worker._thread.join(10)


def test_no_recent_write_lets_the_tick_run_at_once() -> None:
    _, asked = _first_run(lambda: 0.0, tick=0.05)
    assert asked == 1


def test_writes_in_progress_put_the_tick_off_until_they_pause() -> None:
    # "Written just now" three times, then a pause: the sync waits for the fourth question.
    answers = iter([time.monotonic] * 3)

    def last_write() -> float:
        now = next(answers, None)
        return now() if now is not None else 0.0

    _, asked = _first_run(last_write, tick=1.0)
    assert asked == 4


def test_writes_that_never_pause_still_get_their_tick() -> None:
    # The bound: at most one more tick after the one that found writes in progress.
    took, asked = _first_run(time.monotonic, tick=0.2)
    assert asked > 1
    assert took < 5


def test_write_pauses_delay() -> None:
    now = time.monotonic()
    busy = WritePauses(lambda: time.monotonic(), quiet=0.02)
    assert 0 < busy.delay(done=now, interval=1.0) <= 0.021
    # One interval past the previous run's end the work runs, writes or not.
    assert busy.delay(done=now - 2.5, interval=1.0) == 0.0
    assert WritePauses(lambda: 0.0).delay(done=now, interval=1.0) == 0.0
