"""The SQLite WAL stays bounded under back-to-back commits (decision 311)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from warden.store.sql import _Checkpointer, _engine_for, parse_database_url

PAGE = 4096


def _largest_wal(path: Path, restart_frames: int, pause: float, batches: int = 100) -> int:
    """Commit ``batches`` × 20 page-sized rows back to back with a checkpointer beside
    the writer, as the store runs them; the WAL's largest size in bytes. The writer
    pauses ``pause`` s between batches (a count of commits, not a time: the run does the
    same work however fast the machine is)."""
    engine = _engine_for(parse_database_url(f"sqlite:///{path}"), "NORMAL")
    writer = engine.raw_connection()
    cur = writer.cursor()
    cur.execute("PRAGMA wal_autocheckpoint=0")  # as SqlStore: checkpoints are the thread's
    cur.execute("CREATE TABLE t (b BLOB)")
    lock = threading.RLock()  # the store's write lock
    checkpointer = _Checkpointer(engine, lock, interval=0.02, restart_frames=restart_frames)
    wal = Path(f"{path}-wal")
    largest = 0
    try:
        for _ in range(batches):
            for _ in range(20):
                with lock:
                    cur.execute("BEGIN IMMEDIATE")
                    cur.execute("INSERT INTO t VALUES (zeroblob(?))", (PAGE,))
                    cur.execute("COMMIT")
            largest = max(largest, wal.stat().st_size)
            time.sleep(pause)
    finally:
        checkpointer.stop()
        writer.close()
        engine.dispose()
    return largest


def test_back_to_back_commits_restart_the_wal(tmp_path: Path) -> None:
    # The bounded run pauses 5 ms between batches so that its checkpointer gets turns even
    # on a loaded machine. The PASSIVE-only run does not: a pause lets a PASSIVE
    # checkpoint finish and the next commit start the WAL over, and how often that
    # happened depended on the machine's load (4 MB in a loaded CI run, 7-10 MB quiet).
    bounded = _largest_wal(tmp_path / "bounded.db", restart_frames=64, pause=0.005)
    unbounded = _largest_wal(tmp_path / "passive.db", restart_frames=1 << 30, pause=0.0)
    # PASSIVE checkpoints alone never let SQLite start the WAL over while commits keep
    # coming, so it grows with every commit (tens of MB here); a RESTART once it holds 64
    # frames starts it over again and again.
    assert unbounded > 4 * bounded, (unbounded, bounded)
    # And the RESTART is what bounds it, not the pauses: PASSIVE alone with the same
    # pauses reached 4-10 MB; RESTART at 64 frames 1.3-1.6 MB, loaded or not.
    assert bounded < 3 * 1024 * 1024, bounded
