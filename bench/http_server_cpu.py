"""Where one ``warden serve``'s CPU goes per ACS decision over HTTP (issue 16, twelfth session).

Starts ``warden serve`` from the checkout ``--src`` (SQLite ``--sync``, the 100-rule bundle
of ``bench/acs_decision.py``), warms it with 1,000 decisions, then sends ``--rounds`` ×
``--decisions`` signed steps with that benchmark's raw client (2 processes × 4 threads,
``--procs``/``--threads``) and prints the rounds' decisions/s and the server's CPU per
decision (user + system, ``/proc/<pid>/task/*/stat``) in all and by thread (the event
loop is the process's first thread; the group-commit writer is usually the next busiest),
and the whole machine's busy and idle CPU per decision over the same rounds (``/proc/stat``):
what is busy outside the server is the load generator, which shares the machine's cores.
``--pin-cpu N`` pins the server's threads to CPU N (the loop, the group-commit writer and
the background threads then share one core; threads started later inherit it).
``--attach`` runs a profiler on the server for the timed rounds only:

- ``perf-stat``: ``perf stat -e context-switches,cpu-migrations,task-clock``;
- ``perf``: ``perf record -F 2000`` (read with ``perf report --sort dso`` or ``sym``);
- ``strace``: ``strace -c -f`` (system calls; slows the server several-fold);
- ``py-spy``: ``py-spy record --gil -r 250 -f raw`` (Python stacks holding the GIL).

    python bench/http_server_cpu.py --src src --rounds 4 --decisions 4000 \\
      [--attach perf --out /tmp/serve.perf] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import acs_decision as bench  # noqa: E402


def thread_cpu(pid: int) -> dict[str, int]:
    """Clock ticks (user + system) of each thread of ``pid``, keyed ``tid:name``."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        out[f"{tid}:{name}"] = int(stat[11]) + int(stat[12])
    return out


def machine_cpu() -> tuple[int, int]:
    """The whole machine's (busy, idle) clock ticks since boot, all cores (``/proc/stat``:
    idle and iowait are idle; user, nice, system, irq, softirq and steal are busy)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return user + nice + system + irq + softirq + steal, idle + iowait


def profiler(kind: str, pid: int, out: Path) -> list[str]:
    """The command line that attaches ``kind`` to ``pid``, writing ``out``."""
    if kind == "perf-stat":
        return ["perf", "stat", "-e", "context-switches,cpu-migrations,task-clock",
                "-p", str(pid), "-o", str(out)]  # fmt: skip
    if kind == "perf":
        return ["perf", "record", "-F", "2000", "-p", str(pid), "-o", str(out)]
    if kind == "strace":
        return ["strace", "-c", "-f", "-p", str(pid), "-o", str(out)]
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [spy, "record", "--gil", "-r", "250", "-p", str(pid), "-o", str(out), "-f", "raw"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=HERE.parent / "src")
    ap.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--decisions", type=int, default=4000, help="per round")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument(
        "--pin-cpu",
        type=int,
        help="pin every thread of the server to this CPU once it is ready (as `taskset -a "
        "-p -c N`); the load generator stays unpinned",
    )
    ap.add_argument("--attach", choices=["perf-stat", "perf", "strace", "py-spy"])
    ap.add_argument("--out", type=Path, help="the profiler's output file (with --attach)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON only")
    ns = ap.parse_args()
    if ns.attach and ns.out is None:
        ap.error("--attach needs --out")
    src = ns.src.resolve()
    work = Path(tempfile.mkdtemp(prefix="warden-bench-cpu-"))
    (work / "bench-100.yaml").write_text(bench.bundle_100_rules())
    data = work / "data"
    bench.write_key(data / "ikm.key")
    bench._register_with(src, f"sqlite:///{data / 'warden.db'}")
    port = bench._free_port()
    server = bench.start_serve(
        port, data, work / "bench-100.yaml", work / "serve.log", "--sqlite-sync", ns.sync,
        env={**os.environ, "PYTHONPATH": str(src)},
    )  # fmt: skip
    attached: subprocess.Popen[bytes] | None = None
    try:
        bench.wait_ready(port)
        if ns.pin_cpu is not None:
            for tid in os.listdir(f"/proc/{server.pid}/task"):
                os.sched_setaffinity(int(tid), {ns.pin_cpu})
        bench._http_load(port, 1000, ns.procs, ns.threads, "raw")  # warm-up, not counted
        if ns.attach:
            attached = subprocess.Popen(
                profiler(ns.attach, server.pid, ns.out),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # attached before the first timed request
        before = thread_cpu(server.pid)
        busy0, idle0 = machine_cpu()
        rates: list[float] = []
        total = 0
        for _ in range(ns.rounds):
            wall, lat, _ok = bench._http_load(port, ns.decisions, ns.procs, ns.threads, "raw")
            rates.append(len(lat) / wall)
            total += len(lat)
        after = thread_cpu(server.pid)
        busy1, idle1 = machine_cpu()
    finally:
        if attached is not None:
            attached.send_signal(signal.SIGINT)  # each profiler writes its file on SIGINT
            attached.wait(60)
        server.terminate()
        server.wait(10)
    tick = os.sysconf("SC_CLK_TCK")
    per = {k: (after[k] - before.get(k, 0)) / tick / total * 1e6 for k in after}
    threads = sorted(per.items(), key=lambda kv: -kv[1])
    server_us = sum(per.values())
    busy_us = (busy1 - busy0) / tick / total * 1e6
    result = {
        "src": str(src),
        "sync": ns.sync,
        "pin_cpu": ns.pin_cpu,
        "decisions": total,
        "decisions_per_s_by_round": rates,
        "server_cpu_us_per_decision": server_us,
        "by_thread_us": dict(threads),
        # Everything else that ran meanwhile: the load generator's processes, mostly.
        "machine_busy_us_per_decision": busy_us,
        "rest_of_machine_us_per_decision": busy_us - server_us,
        "machine_idle_us_per_decision": (idle1 - idle0) / tick / total * 1e6,
        "cores": os.cpu_count(),
    }
    if ns.json:
        print(json.dumps(result, indent=2))
        return
    print("rounds, decisions/s: " + ", ".join(f"{r:.0f}" for r in rates))
    print(f"server CPU per decision: {server_us:.0f} µs")
    print(
        f"machine CPU per decision: {busy_us:.0f} µs busy ({busy_us - server_us:.0f} outside "
        f"the server), {result['machine_idle_us_per_decision']:.0f} µs idle, "
        f"{result['cores']} cores"
    )
    for name, us in threads[:6]:
        print(f"  {name:<32} {us:6.0f} µs")


if __name__ == "__main__":
    main()
