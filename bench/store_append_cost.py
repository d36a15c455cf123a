"""What one ACS entry costs the store to append on SQLite (issue 16, sixth session).

The store's share of ``bench/side_by_side.py``'s ``warden:<label>`` case, alone. A child
process starts the scenario's Warden (``bench/warden_case.py`` ``ScenarioWarden``, SQLite
``synchronous=NORMAL``), answers 50 asks, and keeps the ``PendingAppend`` of the last
one: the entry, its signed response, the request, the read guard on the pending desk
task. It then appends ``--appends`` copies chained on the live session (fresh step and
entry ids, each chained on the one before) through ``SqlStore.append_many``, one
transaction each, as the ask does; the signing inside the transaction (``indexed``)
returns the captured response, so only the store's work is measured. Per append:

- ``cpu``: the thread's user and system time (``getrusage(RUSAGE_THREAD)``), rounds
  alternating between the ``--warden-src`` trees in a shuffled order, medians over rounds;
- WAL frames per commit (the WAL file's growth ÷ (page size + 24), commits that grew it);
- ``--callgrind``: instructions on the main thread (valgrind's callgrind, collection on
  for the appends only; deterministic, kernel work not counted).

    python bench/store_append_cost.py --warden-src /work/wt-base/src --warden-src src \\
      --label base --label now --rounds 6 --appends 2000 [--callgrind]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from callgrind_decision import main_thread_instructions  # noqa: E402 - beside this file


def _child(appends: int, callgrind: bool, workdir: Path | None = None) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    from dataclasses import replace

    from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR, load_scenario
    from warden_case import ScenarioWarden

    from warden.ledger.chain import chain_entry

    scenario = load_scenario(DEFAULT_PEERS_DIR)
    work = workdir or Path(tempfile.mkdtemp(prefix="warden-append-"))
    warden = ScenarioWarden(work, BUNDLE_PATH)
    store = warden.runtime.store
    captured: list[Any] = []
    append_many = store.append_many

    def capture(items: list[Any]) -> Any:
        captured[:] = items
        return append_many(items)

    store.append_many = capture
    for body in warden.bodies(scenario.REQUEST, 50):
        warden.handle(body)
    store.append_many = append_many
    (item,) = captured
    response = item.response
    sid = item.session_id
    state = store.load_session(sid, fresh=True)
    seq, head = state.head_seq, state.head_hash
    skip = {"entry_hash", "previous_hash"}
    content = {k: v for k, v in item.entry.items() if k not in skip}
    batch = []
    for _ in range(appends + 200):
        step = str(uuid.uuid4())
        entry = chain_entry({**content, "entry_id": str(uuid.uuid4()), "step_id": step}, head)
        batch.append(
            replace(
                item,
                expected_seq=seq,
                entry=entry,
                replay=replace(item.replay, request_id=step),
                indexed=lambda _index: response,
                folded=None,
            )
        )
        seq, head = seq + 1, entry["entry_hash"]
    for warm in batch[:200]:
        (outcome,) = store.append_many([warm])
        if outcome is not None:
            raise RuntimeError(f"append refused: {outcome!r}")
    database = str(store.engine.url.database)
    wal = Path(database + "-wal")
    cur = store._raw.cursor()  # noqa: SLF001 - the harness reads the page size once
    page = int(cur.execute("PRAGMA page_size").fetchone()[0])
    cur.close()
    pid = str(os.getpid())
    if callgrind:
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    frames: list[float] = []
    refused = 0
    before = resource.getrusage(resource.RUSAGE_THREAD)
    for one in batch[200:]:
        size = wal.stat().st_size if wal.exists() else 0
        if store.append_many([one])[0] is not None:
            refused += 1
        grown = wal.stat().st_size - size
        if grown > 0:
            frames.append(grown / (page + 24))
    after = resource.getrusage(resource.RUSAGE_THREAD)
    if callgrind:
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
    warden.close()
    if refused:
        raise RuntimeError(f"{refused} of {appends} appends were refused")
    return {
        "user_us": 1e6 * (after.ru_utime - before.ru_utime) / appends,
        "sys_us": 1e6 * (after.ru_stime - before.ru_stime) / appends,
        "frames": statistics.median(frames) if frames else 0.0,
    }


def _run(src: str, appends: int, *, callgrind: bool = False) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--appends", str(appends)]
    if callgrind:
        total, done = main_thread_instructions([*cmd, "--callgrind"], env)
    else:
        done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if callgrind:
        result["instructions"] = total / appends
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warden-src", action="append", default=[])
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(_child(ns.appends, ns.callgrind)))
        return
    srcs = ns.warden_src or [str(HERE.parent / "src")]
    labels = ns.label or [f"src{i}" for i in range(len(srcs))]
    if len(labels) != len(srcs):
        ap.error("give one --label per --warden-src")
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in labels}
    for _ in range(ns.rounds):
        order = list(zip(labels, srcs, strict=True))
        random.shuffle(order)
        for label, src in order:
            runs[label].append(_run(src, ns.appends))
    print(f"{'case':<10} {'user µs':>8} {'sys µs':>7} {'cpu µs':>7} {'WAL frames':>10}", end="")
    print(f" {'instructions':>13}" if ns.callgrind else "")
    for label, src in zip(labels, srcs, strict=True):
        rows = runs[label]
        user = statistics.median(r["user_us"] for r in rows)
        system = statistics.median(r["sys_us"] for r in rows)
        cpu = statistics.median(r["user_us"] + r["sys_us"] for r in rows)
        frames = statistics.median(r["frames"] for r in rows)
        line = f"{label:<10} {user:>8.1f} {system:>7.1f} {cpu:>7.1f} {frames:>10.1f}"
        if ns.callgrind:
            line += f" {_run(src, min(ns.appends, 1000), callgrind=True)['instructions']:>13,.0f}"
        print(line)
    print(f"machine: {os.getloadavg()[0]:.1f} load, {time.strftime('%H:%M:%S')} local")


if __name__ == "__main__":
    main()
