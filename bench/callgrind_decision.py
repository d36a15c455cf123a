"""Instructions per decision, counted by valgrind's callgrind (issue 16): a load-free
companion to ``bench/side_by_side.py``.

This VM's wall-clock speed drifts 2x with other engineers' load; callgrind counts the
user-space instructions a process executes, which do not. Each case runs in its own
process under ``valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes``:
it warms up, turns collection on (``callgrind_control -i on``), makes ``--calls`` calls,
turns it off, and the main thread's total is divided by the calls. Background threads
(the WAL checkpointer, the transparency log's worker) are excluded: under valgrind they
run far more often per decision than in real time. Kernel work (SQLite's ``pwrite``,
``fcntl``) is not counted either, so this is not a latency: read it beside the
side-by-side wall times.

Cases: ``warden`` (the same call as side_by_side's ``warden:<label>``: ``AcsService.handle``
on a pre-signed ``steps/toolCallRequest`` of the 20-rule scenario, SQLite NORMAL, the
ask finding its pending desk task), given once per ``--warden-src``; ``agt-file`` and
``agt-policy`` (``bench/side_by_side_worker.py``'s AGT cases, in ``--peers-python``).

    python bench/callgrind_decision.py --warden-src ../wt-before/src --warden-src src \\
      --label before --label now --peers agt-file agt-policy          # ~5 min per case
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _child(case: str, calls: int) -> None:
    """Inside valgrind: build the case, warm it, count ``calls`` calls."""
    sys.path.insert(0, str(HERE))
    from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR, load_scenario

    scenario = load_scenario(DEFAULT_PEERS_DIR)
    work = Path(tempfile.mkdtemp(prefix="warden-callgrind-"))
    if case == "warden":
        from warden_case import ScenarioWarden

        warden = ScenarioWarden(work, BUNDLE_PATH)
        bodies = warden.bodies(scenario.REQUEST, calls + 50)
        for body in bodies[:50]:
            warden.handle(body)
        todo = [lambda b=b: warden.handle(b) for b in bodies[50:]]
    else:
        sys.path.insert(0, str(DEFAULT_PEERS_DIR))
        import side_by_side_worker as worker

        agt = worker.AgtCase(scenario, work, with_file_audit=case == "agt-file")
        for _ in range(50):
            agt.call()
        todo = [agt.call] * calls
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    for call in todo:
        call()
    subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)


def main_thread_instructions(
    cmd: list[str], env: dict[str, str]
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run ``cmd`` under callgrind (counting only where the child turns it on, threads
    apart) and return the main thread's instruction total with the finished process
    (its output as text). Raises CalledProcessError if it fails, RuntimeError if
    callgrind wrote no totals."""
    out = Path(tempfile.mkdtemp(prefix="warden-cg-")) / "cg.out"
    valgrind = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
    ]
    done = subprocess.run([*valgrind, *cmd], env=env, check=True, capture_output=True, text=True)
    main = out.parent / (out.name + "-01")
    match = re.search(r"^totals:\s+(\d+)", main.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no totals in {main}")
    return int(match.group(1)), done


def measure(python: str, case: str, calls: int, src: str | None) -> int:
    """Main-thread instructions per call of ``case`` (runs valgrind)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    cmd = [python, str(Path(__file__).resolve()), "--child", case, "--calls", str(calls)]
    total, _ = main_thread_instructions(cmd, env)
    return total // calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warden-src", action="append", default=[])
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--warden-python", default=sys.executable)
    ap.add_argument("--peers-python", default=str(HERE / ".peers" / "bin" / "python"))
    ap.add_argument("--peers", nargs="*", default=["agt-file", "agt-policy"])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        _child(ns.child, ns.calls)
        return
    srcs = ns.warden_src or [str(ROOT / "src")]
    labels = ns.label or (["warden"] if len(srcs) == 1 else ["before", "after"][: len(srcs)])
    if len(labels) != len(srcs):
        ap.error("give one --label per --warden-src")
    rows: list[tuple[str, int]] = []
    for label, src in zip(labels, srcs, strict=True):
        rows.append((f"warden:{label}", measure(ns.warden_python, "warden", ns.calls, src)))
    for peer in ns.peers:
        rows.append((peer, measure(ns.peers_python, peer, ns.calls, None)))
    print(f"{'case':<16} {'instructions per call':>22}")
    for name, count in rows:
        print(f"{name:<16} {count:>22,}")
    reference = dict(rows).get("agt-file")
    if reference:
        for name, count in rows:
            if name.startswith("warden:"):
                print(f"{name} ÷ agt-file: {count / reference:.2f}")


if __name__ == "__main__":
    main()
