"""What the in-process ask's tail is made of (issue 16, ninth session).

One process, one started Warden (``warden_case.ScenarioWarden``, SQLite NORMAL), the
side-by-side's benchmarked ask timed call by call in chunks like
``side_by_side_worker.py`` (idle time between chunks, ``gc.collect()`` before each).
Modes rotate per chunk in a shuffled order, so they share the machine's state:

- ``kept``: every answer kept until the chunk ends (the harness before this session);
- ``dropped``: only the last answer held (what a server does);
- ``nogc``: as ``kept`` with the cyclic GC disabled during the chunk (an experiment);
- ``nockpt``: as ``kept`` with the background WAL checkpoints skipped during the chunk
  (an experiment).

Per call it records the wall time, the main thread's CPU time, its voluntary and
involuntary context switches (``getrusage(RUSAGE_THREAD)``, read outside the timing),
and the time spent in ``BEGIN``/``COMMIT``/other SQL (``--sqltime``: a timing proxy
around the store's cursor). Events with their start and end are recorded from
``gc.callbacks``, the WAL checkpoint thread, the transparency log's checkpoint worker
and the bundle follower. Printed: per mode the median/p90/p99, how many calls overlap
each kind of event, and, among the calls with no context switch, the wall time of
those that overlap each kind against those that overlap none.

    PYTHONPATH=src python bench/ask_tail.py --rounds 10 --sqltime [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics as st
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR, load_scenario  # noqa: E402

pc = time.perf_counter_ns
EVENTS: list[tuple[str, int, int]] = []
PAUSE = threading.Event()
SQL = {"commit": 0, "begin": 0, "other": 0}


def instrument(sqltime: bool) -> None:
    """Record background work and GC as events; optionally time the store's SQL."""
    from warden.policy import activation
    from warden.store import sql as sqlmod
    from warden.tlog import service as tls

    def run(self: Any) -> None:  # _Checkpointer._run, with events and PAUSE
        conn = self._engine.raw_connection()
        try:
            while not self._stop.wait(self._interval):
                if PAUSE.is_set():
                    continue
                t0 = pc()
                conn.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                EVENTS.append(("ckpt", t0, pc()))
            conn.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            conn.close()

    sqlmod._Checkpointer._run = run  # type: ignore[method-assign]

    def timed(kind: str, fn: Any) -> Any:
        def wrapper(self: Any, *a: Any, **k: Any) -> Any:
            t0 = pc()
            try:
                return fn(self, *a, **k)
            finally:
                EVENTS.append((kind, t0, pc()))

        return wrapper

    tls.TransparencyLog.maybe_checkpoint = timed("tlog", tls.TransparencyLog.maybe_checkpoint)  # type: ignore[method-assign]
    activation.BundleFollower.check = timed("follow", activation.BundleFollower.check)  # type: ignore[method-assign]
    started = [0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = pc()
        else:
            EVENTS.append((f"gc{info['generation']}", started[0], pc()))

    gc.callbacks.append(on_gc)
    if not sqltime:
        return

    class Cur:
        def __init__(self, cur: Any) -> None:
            self._c = cur

        def execute(self, sql: str, *a: Any) -> Any:
            t0 = pc()
            r = self._c.execute(sql, *a)
            kind = (
                "commit"
                if sql.endswith("COMMIT")
                else "begin"
                if sql.startswith("BEGIN")
                else "other"
            )
            SQL[kind] += pc() - t0
            return self if r is self._c else r

        def __getattr__(self, name: str) -> Any:
            return getattr(self._c, name)

        def __iter__(self) -> Any:
            return iter(self._c)

    cursor = sqlmod.SqlStore._cursor
    sqlmod.SqlStore._cursor = lambda self, **k: Cur(cursor(self, **k))  # type: ignore[method-assign]


def measure(ns: argparse.Namespace) -> list[dict[str, Any]]:
    from warden_case import ScenarioWarden

    scenario = load_scenario(DEFAULT_PEERS_DIR)
    warden = ScenarioWarden(Path(tempfile.mkdtemp(prefix="warden-ask-tail-")), BUNDLE_PATH)
    for body in warden.bodies(scenario.REQUEST, ns.warmup):
        warden.handle(body)
    rows: list[dict[str, Any]] = []
    rng = random.Random(ns.seed)
    modes = ns.modes.split(",")
    try:
        for rd in range(ns.rounds):
            rng.shuffle(modes)
            for mode in modes:
                time.sleep(ns.idle)
                bodies = warden.bodies(scenario.REQUEST, ns.calls + 20)
                for body in bodies[:20]:
                    warden.handle(body)
                kept: list[Any] = []
                gc.collect()
                if mode == "nogc":
                    gc.disable()
                if mode == "nockpt":
                    PAUSE.set()
                for i, body in enumerate(bodies[20:]):
                    ru0 = resource.getrusage(resource.RUSAGE_THREAD)
                    s0 = dict(SQL)
                    c0 = time.thread_time_ns()
                    t0 = pc()
                    answer = warden.handle(body)
                    t1 = pc()
                    c1 = time.thread_time_ns()
                    if mode != "dropped":
                        kept.append(answer)
                    ru1 = resource.getrusage(resource.RUSAGE_THREAD)
                    rows.append(
                        {"mode": mode, "round": rd, "i": i, "t0": t0, "t1": t1, "cpu": c1 - c0,
                         "vcs": ru1.ru_nvcsw - ru0.ru_nvcsw, "ivcs": ru1.ru_nivcsw - ru0.ru_nivcsw,
                         **{k: SQL[k] - s0[k] for k in SQL}}
                    )  # fmt: skip
                gc.enable()
                PAUSE.clear()
                del kept
    finally:
        warden.close()
    return rows


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] if s else float("nan")


def report(rows: list[dict[str, Any]], events: list[tuple[str, int, int]]) -> None:
    kinds = ("gc0", "gc1", "gc2", "ckpt", "tlog", "follow")
    by_kind = {k: [(a, b) for e, a, b in events if e == k] for k in kinds}

    def overlaps(r: dict[str, Any], kind: str) -> bool:
        return any(a < r["t1"] and b > r["t0"] for a, b in by_kind[kind])

    def us(v: float) -> str:
        return f"{v / 1000:.1f}"

    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_mode[r["mode"]].append(r)
    print("mode      n  median    p90    p99  p99.9 | cpu med  p99 | commit med  p99 | "
          "calls overlapping: gc0 ckpt tlog | switched: involuntary voluntary-only")  # fmt: skip
    for mode, rs in sorted(by_mode.items()):
        w = [r["t1"] - r["t0"] for r in rs]
        c = [r["cpu"] for r in rs]
        cm = [r["commit"] for r in rs]
        print(
            f"{mode:8} {len(rs):5} {us(st.median(w)):>7} {us(pct(w, 0.9)):>6} "
            f"{us(pct(w, 0.99)):>6} "
            f"{us(pct(w, 0.999)):>6} | {us(st.median(c)):>7} {us(pct(c, 0.99)):>5} | "
            f"{us(st.median(cm)):>10} {us(pct(cm, 0.99)):>5} | "
            f"{sum(overlaps(r, 'gc0') for r in rs):>21} {sum(overlaps(r, 'ckpt') for r in rs):>4} "
            f"{sum(overlaps(r, 'tlog') for r in rs):>4} | "
            f"{sum(1 for r in rs if r['ivcs']):>21} "
            f"{sum(1 for r in rs if r['vcs'] and not r['ivcs']):>9}"
        )
    n = len(rows)
    walls = [r["t1"] - r["t0"] for r in rows]
    top = [r for r in rows if r["t1"] - r["t0"] >= pct(walls, 0.98)]
    print(
        f"\nslowest 2 % of all calls: {len(top)}; with an involuntary switch "
        f"{sum(1 for r in top if r['ivcs'])}; median wall − thread CPU "
        f"{us(st.median(r['t1'] - r['t0'] - r['cpu'] for r in top))} µs"
    )
    clean = [r for r in rows if not r["ivcs"] and not r["vcs"]]
    print(f"calls with no context switch: {len(clean)} of {n}; their wall time (µs) by overlap:")
    groups = {
        "none": [r for r in clean if not any(overlaps(r, k) for k in kinds)],
        "gc0": [r for r in clean if overlaps(r, "gc0")],
        "ckpt": [r for r in clean if overlaps(r, "ckpt") and not overlaps(r, "gc0")],
        "tlog": [r for r in clean if overlaps(r, "tlog")],
    }
    for name, rs in groups.items():
        if rs:
            w = [r["t1"] - r["t0"] for r in rs]
            print(f"  {name:5} n={len(rs):5} median {us(st.median(w)):>7} p90 {us(pct(w, .9)):>7} "
                  f"p99 {us(pct(w, .99)):>7}")  # fmt: skip
    waits = [r for r in rows if r["vcs"] and not r["ivcs"] and max(r["begin"], r["commit"]) > 1e6]
    print(f"calls blocked > 1 ms in BEGIN or COMMIT (voluntary switch only): {len(waits)}")
    durations = {k: [(b - a) / 1000 for a, b in v] for k, v in by_kind.items() if v}
    for kind, ds in durations.items():
        print(f"{kind:6} {len(ds):4} events, median {st.median(ds):.1f} µs, max {max(ds):.1f} µs")
    print("modes in the slowest 2 %:", dict(Counter(r["mode"] for r in top)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=250, help="timed calls per chunk")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=800)
    ap.add_argument("--idle", type=float, default=0.8, help="seconds between chunks")
    ap.add_argument("--modes", default="kept,dropped,nogc,nockpt")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sqltime", action="store_true")
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()
    instrument(ns.sqltime)
    rows = measure(ns)
    report(rows, EVENTS)
    if ns.json:
        ns.json.write_text(json.dumps({"rows": rows, "events": EVENTS}))


if __name__ == "__main__":
    main()
