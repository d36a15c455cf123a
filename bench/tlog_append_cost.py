"""What appending to the transparency log costs the decision path (issue 17 item 6).

Two runtimes in this process, same checkout, same 100-rule bundle and envelopes as
``bench/acs_decision.py``'s in-process case (SQLite, one agent session each):

- ``log``: Warden as it ships: each write transaction reads the next leaf index once
  (``SqlStore._leaf_index``), each entry row carries its ``log_index`` under the unique
  index ``uq_entries_log_index``, and the checkpoint worker hashes new leaves and signs
  checkpoints in the background;
- ``nolog``: the same with the log short-circuited by this harness only (no product
  setting): ``_leaf_index`` counts in memory without reading the database, the unique
  index is dropped, and the checkpoint worker is stopped. What is left of the log is an
  integer column written per row.

Rounds alternate in a freshly shuffled order; each round times ``--chunk`` decisions on
each runtime (every decision timed on its own). Reported: median and p99 per case,
``log ÷ nolog`` of the medians and p99s, and the median over rounds of the per-round
ratio of chunk medians (paired: a slow phase of the machine falls on both). The target
is ≤ 1.05.

    PYTHONPATH=src python bench/tlog_append_cost.py --rounds 20 --chunk 1000
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from acs_decision import (  # noqa: E402
    agent_client,
    bundle_100_rules,
    percentiles,
    read_file_bodies,
    register_agent,
    write_key,
)

from warden.runtime import Runtime  # noqa: E402
from warden.settings import Settings  # noqa: E402


def start(workdir: Path, name: str, sync: str) -> Runtime:
    data = workdir / name
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=workdir / "bench-100.yaml",
            key_file=write_key(data / "ikm.key"),
            sqlite_sync=sync,
        )  # type: ignore[arg-type]
    )
    register_agent(rt.settings.resolved_database_url())
    return rt


def short_circuit_log(rt: Runtime) -> None:
    """Bench only: take the transparency log off ``rt``'s decision path."""
    if rt.tlog_worker is not None:
        rt.tlog_worker.stop()
        rt.tlog_worker = None
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX IF EXISTS uq_entries_log_index")
    counter = itertools.count(10**12)

    def leaf_index(self: Any, cur: Any) -> int:
        if self._log_tx is None:
            n = next(counter)
            self._log_tx = [n, n]
        return int(self._log_tx[1])

    rt.store._leaf_index = types.MethodType(leaf_index, rt.store)  # type: ignore[method-assign]


def bodies_for(rt: Runtime, n: int) -> tuple[Any, list[bytes]]:
    client = agent_client(rt.acs.handle)
    assert "result" in client.hello()
    assert client.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    bodies = read_file_bodies(client, n)
    return rt.acs.handle, bodies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--sync", default="NORMAL")
    ap.add_argument("--seed", type=int, default=17)
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    total = ns.rounds * ns.chunk + ns.warmup
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bench-100.yaml").write_text(bundle_100_rules())
        runtimes = {"log": start(work, "log", ns.sync), "nolog": start(work, "nolog", ns.sync)}
        short_circuit_log(runtimes["nolog"])
        try:
            feeds = {name: bodies_for(rt, total) for name, rt in runtimes.items()}
            cursor = dict.fromkeys(runtimes, 0)
            for name, (handle, bodies) in feeds.items():
                for b in bodies[: ns.warmup]:
                    handle(b)
                cursor[name] = ns.warmup
            samples: dict[str, list[float]] = {name: [] for name in runtimes}
            chunk_medians: dict[str, list[float]] = {name: [] for name in runtimes}
            for _ in range(ns.rounds):
                order = list(runtimes)
                rng.shuffle(order)
                for name in order:
                    handle, bodies = feeds[name]
                    gc.collect()
                    lat = []
                    last: dict[str, Any] = {}
                    for b in bodies[cursor[name] : cursor[name] + ns.chunk]:
                        t0 = time.perf_counter()
                        last = handle(b)
                        lat.append(time.perf_counter() - t0)
                    assert last["result"]["decision"] == "allow", last
                    cursor[name] += ns.chunk
                    samples[name].extend(lat)
                    chunk_medians[name].append(statistics.median(lat))
            log_rt = runtimes["log"]
            assert log_rt.tlog is not None
            signed = log_rt.tlog.checkpoint().tree_size
        finally:
            for rt in runtimes.values():
                rt.close()
    stats = {name: percentiles(v) for name, v in samples.items()}
    doc = {
        "sync": ns.sync,
        "rounds": ns.rounds,
        "chunk": ns.chunk,
        "log_leaves_signed": signed,
        "latency_us": stats,
        "log ÷ nolog": {
            "median": round(stats["log"]["median_us"] / stats["nolog"]["median_us"], 4),
            "p99": round(stats["log"]["p99_us"] / stats["nolog"]["p99_us"], 4),
            "paired_median": round(
                statistics.median(
                    a / b for a, b in zip(chunk_medians["log"], chunk_medians["nolog"], strict=True)
                ),
                4,
            ),
        },
    }
    print(json.dumps(doc, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
