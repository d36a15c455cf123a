"""Spend benchmark (issue 3): reservations per second on SQLite.

Each reservation is one write transaction: expire due holds, check the cap on
every budget of an org → team → agent path, take the hold on all three, write
the reservation and chain a ``warden/spend.reserve`` audit entry, commit.
Measured single-threaded, from several threads of one process, and from
several processes on the same database file, with SQLite ``synchronous``
FULL and NORMAL. The baseline, run in the same process, is ``remaining()``
(a read of the same path, no write): the ratio shows what the write costs.

    python bench/spend_reservations.py                 # 3000 reservations per case
    python bench/spend_reservations.py --reservations 500
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from warden.crypto.hmac_keys import SessionKeys
from warden.ledger.ledger import Ledger
from warden.spend import Budget, BudgetKind, Period, SpendEngine
from warden.spend.audit import SpendAuditor
from warden.store import open_store

IKM = bytes(range(32))
AGENT = "bench.team.agent"


def engine(db: Path, sync: str) -> tuple[SpendEngine, Any]:
    store = open_store(f"sqlite:///{db}", sqlite_sync=sync)
    return SpendEngine(store, SpendAuditor(Ledger(store, SessionKeys(IKM), "warden"))), store


def setup(db: Path, sync: str) -> None:
    eng, store = engine(db, sync)
    big = Decimal("1e12")
    eng.define_budget(Budget("bench", BudgetKind.ORG, "USD", big, Period.MONTH))
    eng.define_budget(
        Budget("bench.team", BudgetKind.TEAM, "USD", big, Period.DAY, parent_id="bench")
    )
    eng.define_budget(
        Budget(AGENT, BudgetKind.AGENT, "USD", big, Period.NONE, parent_id="bench.team")
    )
    store.close()


def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"median_us": statistics.median(s) * 1e6, "p99_us": s[int(len(s) * 0.99)] * 1e6}


def run_threads(db: Path, sync: str, n: int, threads: int) -> dict[str, Any]:
    eng, store = engine(db, sync)
    lat: list[float] = []
    lock = threading.Lock()

    def work(count: int) -> None:
        mine = []
        for _ in range(count):
            t0 = time.perf_counter()
            eng.reserve(AGENT, "1.25", "USD", action="bench")
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    base = []
    for _ in range(min(n, 1000)):
        t0 = time.perf_counter()
        eng.remaining(AGENT)
        base.append(time.perf_counter() - t0)
    ts = [threading.Thread(target=work, args=(n // threads,)) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    store.close()
    out = {
        "sync": sync,
        "mode": f"{threads} thread(s)",
        "reservations": len(lat),
        "per_s": len(lat) / wall,
        **pct(lat),
        "baseline_read_median_us": pct(base)["median_us"],
    }
    out["ratio_to_read"] = out["median_us"] / out["baseline_read_median_us"]
    return out


def _proc(db: str, sync: str, n: int, q: Any, start: Any) -> None:
    eng, store = engine(Path(db), sync)
    start.wait()
    t0 = time.perf_counter()
    for _ in range(n):
        eng.reserve(AGENT, "1.25", "USD", action="bench")
    q.put((t0, time.perf_counter()))
    store.close()


def run_procs(db: Path, sync: str, n: int, procs: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q, start = ctx.Queue(), ctx.Event()
    ps = [
        ctx.Process(target=_proc, args=(str(db), sync, n // procs, q, start)) for _ in range(procs)
    ]
    for p in ps:
        p.start()
    time.sleep(2.0)  # let every process import and open the store
    start.set()
    spans = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    total = (n // procs) * procs
    return {
        "sync": sync,
        "mode": f"{procs} processes",
        "reservations": total,
        "per_s": total / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reservations", type=int, default=3000)
    ap.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sync in args.sync:
            for mode in ("1", "4", "p2"):
                db = Path(tmp) / f"{sync}-{mode}.db"
                setup(db, sync)
                if mode == "p2":
                    results.append(run_procs(db, sync, args.reservations, 2))
                else:
                    results.append(run_threads(db, sync, args.reservations, int(mode)))
    out = {"python": sys.version.split()[0], "results": results}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
