"""The WAL checkpointer waits for a pause in this process's writes, within a bound
(decision 1123)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from warden.store.sql import _Checkpointer, _engine_for, parse_database_url


def _checkpointed(path: Path, last_write: Callable[[], float], interval: float) -> int:
    """Commit rows into a fresh database, start a checkpointer with ``last_write``, and
    wait (up to 30 s) until it has copied them into the database file; returns how many
    times it asked ``last_write`` by then (0 when it never checkpointed)."""
    engine = _engine_for(parse_database_url(f"sqlite:///{path}"), "NORMAL")
    writer = engine.raw_connection()
    cur = writer.cursor()
    cur.execute("PRAGMA wal_autocheckpoint=0")
    cur.execute("CREATE TABLE t (b BLOB)")
    for _ in range(50):
        cur.execute("BEGIN IMMEDIATE")
        cur.execute("INSERT INTO t VALUES (zeroblob(4096))")
        cur.execute("COMMIT")
    before = path.stat().st_size
    asked = [0]

    def probe() -> float:
        asked[0] += 1
        return last_write()

    checkpointer = _Checkpointer(engine, threading.RLock(), interval=interval, last_write=probe)
    try:
        deadline = time.monotonic() + 30
        while path.stat().st_size == before:
            if time.monotonic() > deadline:
                return 0
            time.sleep(0.01)
        return asked[0]
    finally:
        checkpointer.stop()
        writer.close()
        engine.dispose()


def test_a_pause_lets_the_checkpoint_run(tmp_path: Path) -> None:
    assert _checkpointed(tmp_path / "idle.db", lambda: 0.0, interval=0.05) >= 1


def test_writes_in_progress_put_the_checkpoint_off_until_they_pause(tmp_path: Path) -> None:
    # "Written just now" three times, then a pause: the checkpoint waits for the pause
    # (the fourth question), well inside the bound of one more interval.
    answers = iter([time.monotonic] * 3)

    def last_write() -> float:
        now = next(answers, None)
        return now() if now is not None else 0.0

    assert _checkpointed(tmp_path / "busy.db", last_write, interval=1.0) >= 4


def test_writes_that_never_pause_still_get_their_checkpoint(tmp_path: Path) -> None:
    # The bound: at most one more interval after the tick.
    assert _checkpointed(tmp_path / "always.db", time.monotonic, interval=0.05) >= 1
