"""How many timed asks overlap a WAL checkpoint, in the side-by-side's pattern (issue 16,
tenth session; decision 1123).

One process, one started Warden (``warden_case.ScenarioWarden``, SQLite NORMAL): 800
untimed asks, then ``ROUNDS`` chunks of 250 timed asks, each after ``IDLE`` seconds of
pause (the side-by-side runs the other cases meanwhile). The store's own checkpointer
runs unchanged; only its connection is wrapped to record when each ``PRAGMA
wal_checkpoint`` ran. Prints how many timed asks overlapped one.

    PYTHONPATH=CHECKOUT/src python bench/checkpoint_overlap.py [IDLE [ROUNDS]]
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR, load_scenario  # noqa: E402

from warden.store import sql as store_sql  # noqa: E402

#: (start, end) in ``perf_counter_ns`` of every ``PRAGMA wal_checkpoint`` run.
CHECKPOINTS: list[tuple[int, int]] = []


class _Cursor:
    def __init__(self, cur: Any) -> None:
        self._cur = cur

    def execute(self, sql: str, *args: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return self._cur.execute(sql, *args)
        finally:
            if "wal_checkpoint" in sql:
                CHECKPOINTS.append((t0, time.perf_counter_ns()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _Connection:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def cursor(self) -> _Cursor:
        return _Cursor(self._conn.cursor())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Engine:
    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def raw_connection(self) -> _Connection:
        return _Connection(self._engine.raw_connection())


_run = store_sql._Checkpointer._run  # noqa: SLF001


def _recorded_run(self: Any) -> None:
    self._engine = _Engine(self._engine)
    _run(self)


def main() -> None:
    store_sql._Checkpointer._run = _recorded_run  # type: ignore[method-assign]  # noqa: SLF001
    from warden_case import ScenarioWarden

    idle = float(sys.argv[1]) if len(sys.argv) > 1 else 0.3
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    scenario = load_scenario(DEFAULT_PEERS_DIR)
    warden = ScenarioWarden(Path(tempfile.mkdtemp()), BUNDLE_PATH, "NORMAL")
    calls: list[tuple[int, int]] = []

    def chunk(n: int, keep: bool) -> None:
        bodies = warden.bodies(scenario.REQUEST, n)
        gc.collect()
        for body in bodies:
            t0 = time.perf_counter_ns()
            warden.handle(body)
            t1 = time.perf_counter_ns()
            if keep:
                calls.append((t0, t1))

    chunk(800, False)
    for _ in range(rounds):
        time.sleep(idle)
        chunk(250, True)
    warden.close()
    spans = sorted(CHECKPOINTS)
    over = sum(1 for t0, t1 in calls if any(a < t1 and b > t0 for a, b in spans))
    walls = sorted(t1 - t0 for t0, t1 in calls)
    print(
        f"{store_sql.__file__}: calls {len(calls)}, checkpoints {len(spans)}, calls "
        f"overlapping one {over} ({100 * over / len(calls):.1f} %), median "
        f"{walls[len(walls) // 2] / 1e3:.1f} p99 {walls[int(len(walls) * 0.99)] / 1e3:.1f} µs"
    )


if __name__ == "__main__":
    main()
