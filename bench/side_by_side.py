"""Side-by-side benchmark (issue 16 item 5): Warden's full decision against the peers.

Interleaved in one run, on the peers' 20-rule scenario (``../shared/peers/scenario.py``;
the benchmarked request hits rule r19 → ask):

- ``warden:<label>``, one per ``--warden-src``: Warden's full ACS decision in process
  through ``AcsService.handle`` (strict parse, HMAC verify as the registered agent
  ``agent-7``, ``Guardian.decide`` on ``bench/scenario-20-rules.yaml``, the approval gate,
  the ContextEntry committed with SQLite ``synchronous=NORMAL``, the signed response);
- ``agt-file``: Microsoft AGT 5.0.0 ``PolicyEngine.evaluate`` + ``AuditLog(FileAuditSink)``;
- ``agt-policy``: AGT's ``PolicyEngine.evaluate`` alone;
- ``cedar``: cedarpy 4.12.2 ``is_authorized`` (pre-parsed policy set) + the ask mapping.

Each case is one persistent worker process (``bench/side_by_side_worker.py``): Warden's
with ``PYTHONPATH`` = its checkout's ``src``, the peers' with the peers' own venv
(``--peers-python``). Each round visits every case in a freshly shuffled order and
times one chunk of ``--chunk`` calls there (``perf_counter_ns`` per call, after
``--chunk-warmup`` untimed calls and a ``gc.collect()``), so every case sees the same
machine state. Before timing, every Warden checks the scenario's 10 probes against the
reference verdicts and the run stops if one differs.

Printed: n, median, p90, p99, p99.9 and mean of wall time per case (µs) and the
median CPU time of the process per call, then the ratios: each Warden ÷ ``agt-file``
and each later Warden ÷ the first (``after ÷ before``), of the wall-time medians and
p99s (the issue's measures), ``paired`` (the median over rounds of the ratio of the
two cases' chunk medians in that round) and ``cpu`` (of the CPU-time medians). On a
loaded VM the last two move least between runs. ``--json FILE`` writes the same, with
each chunk's median and the probe tables.

    python3 -m venv bench/.peers && bench/.peers/bin/pip install \\
      agent-governance-toolkit-core==5.0.0 agent-governance-toolkit-protocols==5.0.0 cedarpy==4.12.2
    python bench/side_by_side.py                                   # this checkout only
    python bench/side_by_side.py --warden-src ../wt-before/src --warden-src src \\
      --json bench/out/side_by_side.json                           # labelled before, after
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR, bundle_yaml, load_scenario  # noqa: E402

WORKER = HERE / "side_by_side_worker.py"
PEER_CASES = ("agt-file", "agt-policy", "cedar")
#: What each peer case is, for the table.
PEER_TITLES = {
    "agt-file": "AGT policy + AuditLog(FileAuditSink)",
    "agt-policy": "AGT PolicyEngine.evaluate only",
    "cedar": "cedarpy is_authorized + ask mapping",
}
#: The denominator of the issue's target ratios.
REFERENCE = "agt-file"


@dataclass
class Worker:
    """One case's process: its name, the pipe ends and where its stderr goes."""

    name: str
    title: str
    proc: subprocess.Popen[str]
    log: Path
    info: dict[str, Any] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    #: The median wall time of each timed chunk, in round order (ns).
    chunk_medians: list[float] = field(default_factory=list)

    def _read(self) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        line = out.readline() if out is not None else ""
        if not line:
            self.proc.wait(10)
            tail = self.log.read_text()[-3000:]
            raise SystemExit(f"worker {self.name} ended (exit {self.proc.returncode}):\n{tail}")
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    def start(self) -> None:
        ready = self._read()
        self.info, self.probes = ready["info"], ready["probes"]

    def run(self, n: int, warmup: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": "run", "n": n, "warmup": warmup}) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        self.samples.extend(answer["samples"])
        self.cpu.extend(answer["cpu"])
        self.chunk_medians.append(statistics.median(answer["samples"]))

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def spawn(name: str, title: str, python: str, args: list[str], env: dict[str, str],
          workdir: Path) -> Worker:  # fmt: skip
    """Start one worker process (its stderr to ``workdir/<name>.log``)."""
    log = workdir / f"{name.replace(':', '-')}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [python, str(WORKER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=str(workdir),
        )
    return Worker(name, title, proc, log)


def summarize(samples_ns: list[int]) -> dict[str, float]:
    """n, median, p90, p99, p99.9, max and mean in µs. Percentiles are nearest-rank on the
    sorted samples at ``round(p/100 * (n-1))``, as ``scenario.summarize_ns`` computes them."""
    s = sorted(samples_ns)
    n = len(s)

    def pct(p: float) -> float:
        return s[min(n - 1, int(round(p / 100.0 * (n - 1))))] / 1000.0

    return {
        "n": n,
        "median_us": statistics.median(s) / 1000.0,
        "p90_us": pct(90),
        "p99_us": pct(99),
        "p999_us": pct(99.9),
        "max_us": s[-1] / 1000.0,
        "mean_us": sum(s) / n / 1000.0,
    }


def ratios(workers: dict[str, Worker], wardens: list[str]) -> list[dict[str, Any]]:
    """Each Warden ÷ the reference peer, and each later Warden ÷ the first: of the
    medians and p99s of wall time; ``paired``, the median over rounds of the ratio of
    the two chunk medians of the same round (chunks close in time, so a slow phase of
    the VM falls on both); ``cpu``, of the medians of CPU time per call."""
    rows: list[dict[str, Any]] = []
    pairs = [(w, REFERENCE) for w in wardens if REFERENCE in workers]
    pairs += [(w, wardens[0]) for w in wardens[1:]]
    for num, den in pairs:
        a, b = workers[num], workers[den]
        rows.append(
            {
                "ratio": f"{num} ÷ {den}",
                "median": statistics.median(a.samples) / statistics.median(b.samples),
                "p99": summarize(a.samples)["p99_us"] / summarize(b.samples)["p99_us"],
                "paired": statistics.median(
                    x / y for x, y in zip(a.chunk_medians, b.chunk_medians, strict=True)
                ),
                "cpu": statistics.median(a.cpu) / statistics.median(b.cpu),
            }
        )
    return rows


def default_labels(n: int) -> list[str]:
    if n == 1:
        return ["warden"]
    if n == 2:
        return ["before", "after"]
    return [f"w{i + 1}" for i in range(n)]


def check_probes(workers: list[Worker]) -> None:
    """Stop the run when a Warden gives a probe another verdict than the reference;
    print the peers' fidelity (they are measured as they are)."""
    for w in workers:
        bad = [p for p in w.probes if not p["ok"]]
        print(f"probes {w.name:16} {len(w.probes) - len(bad)}/{len(w.probes)} as the reference")
        if bad and w.name.startswith("warden:"):
            rows = "\n".join(f"  {p}" for p in bad)
            raise SystemExit(f"{w.name} does not decide the scenario as the reference:\n{rows}")


def print_table(workers: list[Worker], ratio_rows: list[dict[str, Any]]) -> None:
    head = f"{'case':16} {'n':>7} {'median':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} {'mean':>9}"
    print(head + f" {'cpu med':>9}  (µs)")
    for w in workers:
        s = summarize(w.samples)
        cpu = statistics.median(w.cpu) / 1000.0
        print(
            f"{w.name:16} {s['n']:>7} {s['median_us']:>9.1f} {s['p90_us']:>9.1f} "
            f"{s['p99_us']:>9.1f} {s['p999_us']:>9.1f} {s['mean_us']:>9.1f} {cpu:>9.1f}  {w.title}"
        )
    print()
    print(f"{'ratio':34} {'median':>7} {'p99':>7} {'paired':>7} {'cpu':>7}")
    for r in ratio_rows:
        print(
            f"{r['ratio']:34} {r['median']:>7.2f} {r['p99']:>7.2f} {r['paired']:>7.2f} "
            f"{r['cpu']:>7.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--warden-src", type=Path, action="append",
                    help="a Warden checkout's src folder; give it once per checkout "
                         "(default: this checkout's src)")  # fmt: skip
    ap.add_argument(
        "--label",
        action="append",
        help="a name per --warden-src, in order (default: warden; before, after)",
    )
    ap.add_argument("--warden-python", default=sys.executable)
    ap.add_argument("--peers-python", default=str(HERE / ".peers" / "bin" / "python"))
    ap.add_argument("--peers-dir", type=Path, default=DEFAULT_PEERS_DIR)
    ap.add_argument("--peers", nargs="*", default=list(PEER_CASES), choices=PEER_CASES,
                    help="peer cases to run (none: Wardens only)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--chunk", type=int, default=300, help="timed calls per case per round")
    ap.add_argument("--chunk-warmup", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=1000, help="untimed calls per case first")
    ap.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL", "EXTRA"])
    ap.add_argument("--seed", type=int, help="for the shuffles (default: random)")
    ap.add_argument(
        "--hash-seed",
        default="0",
        help="PYTHONHASHSEED of every worker, so that no two processes differ by their "
        "string hashes' layout ('random' for Python's default)",
    )
    ap.add_argument(
        "--pin",
        type=int,
        metavar="CPU",
        help="run every worker on this one CPU (they take turns anyway): no migrations",
    )
    ap.add_argument(
        "--keep-answers",
        action="append",
        default=[],
        metavar="LABEL",
        help="the Warden of this label keeps every answer until its chunk ends, as this "
        "harness did before issue 16's ninth session (for comparing; the survivors set off "
        "generation-0 collections in Warden's timed calls)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ns = ap.parse_args()

    srcs = [p.resolve() for p in (ns.warden_src or [ROOT / "src"])]
    labels = ns.label or default_labels(len(srcs))
    if len(labels) != len(srcs) or len(set(labels)) != len(labels):
        raise SystemExit("give one distinct --label per --warden-src")
    if unknown := set(ns.keep_answers) - set(labels):
        raise SystemExit(f"--keep-answers names no --label: {', '.join(sorted(unknown))}")
    for src in srcs:
        if not (src / "warden" / "__init__.py").is_file():
            raise SystemExit(f"{src} holds no warden package (give a checkout's src folder)")
    if ns.peers and not Path(ns.peers_python).exists():
        raise SystemExit(f"no peers Python at {ns.peers_python}; see this file's docstring")
    scenario = load_scenario(ns.peers_dir)
    if BUNDLE_PATH.read_text() != bundle_yaml(scenario.RULES, scenario.DEFAULT):
        raise SystemExit(f"{BUNDLE_PATH} is not the scenario's translation: run scenario_bundle.py")
    seed = ns.seed if ns.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)

    started = time.monotonic()
    workers: list[Worker] = []
    common = {"PYTHONHASHSEED": ns.hash_seed}
    with tempfile.TemporaryDirectory(prefix="warden-side-by-side-") as tmp:
        work = Path(tmp)
        base = ["--peers-dir", str(ns.peers_dir)]
        try:
            for label, src in zip(labels, srcs, strict=True):
                env = {**os.environ, **common, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
                args = [*base, "--case", "warden", "--workdir", str(work / label),
                        "--bundle", str(BUNDLE_PATH), "--sync", ns.sync]  # fmt: skip
                if label in ns.keep_answers:
                    args.append("--keep-answers")
                title = f"Warden full ACS ask, SQLite {ns.sync} ({src})"
                workers.append(spawn(f"warden:{label}", title, ns.warden_python, args, env, work))
            peer_env = {
                k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
            }
            peer_env.update(common, PEERS_SCRATCH=str(work / "peers-scratch"))
            for name in ns.peers:
                args = [*base, "--case", name, "--workdir", str(work / name)]
                workers.append(
                    spawn(name, PEER_TITLES[name], ns.peers_python, args, peer_env, work)
                )
            for w in workers:
                if ns.pin is not None:
                    os.sched_setaffinity(w.proc.pid, {ns.pin})
            for w in workers:
                w.start()
                if w.name.startswith("warden:") and not Path(w.info["warden"]).is_relative_to(
                    srcs[labels.index(w.name.split(":", 1)[1])]
                ):
                    raise SystemExit(f"{w.name} imported {w.info['warden']}, not its --warden-src")
            check_probes(workers)
            for w in workers:
                w.run(ns.warmup, 0)
                w.samples.clear()
                w.cpu.clear()
                w.chunk_medians.clear()
            for r in range(ns.rounds):
                order = list(workers)
                rng.shuffle(order)
                for w in order:
                    w.run(ns.chunk, ns.chunk_warmup)
                print(f"\rround {r + 1}/{ns.rounds}", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
        finally:
            for w in workers:
                w.stop()

    summary = {w.name: summarize(w.samples) for w in workers}
    wardens = [w.name for w in workers if w.name.startswith("warden:")]
    ratio_rows = ratios({w.name: w for w in workers}, wardens)
    print_table(workers, ratio_rows)
    elapsed = time.monotonic() - started
    print(
        f"\n{ns.rounds} rounds × {ns.chunk} calls per case, shuffled (seed {seed}); {elapsed:.0f} s"
    )
    if ns.json:
        doc = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "settings": {
                "rounds": ns.rounds,
                "chunk": ns.chunk,
                "chunk_warmup": ns.chunk_warmup,
                "warmup": ns.warmup,
                "sync": ns.sync,
                "seed": seed,
            },  # fmt: skip
            "cases": {
                w.name: {
                    "title": w.title,
                    "info": w.info,
                    **summary[w.name],
                    "cpu_median_us": statistics.median(w.cpu) / 1000.0,
                    "cpu_p99_us": summarize(w.cpu)["p99_us"],
                    "chunk_medians_us": [m / 1000.0 for m in w.chunk_medians],
                    "probes": w.probes,
                }
                for w in workers
            },
            "ratios": ratio_rows,
            "elapsed_s": elapsed,
        }
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
