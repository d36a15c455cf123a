"""CPU a ``warden serve`` spends from its start until ``/healthz`` answers (issue 16,
fifth session: the test suite and every deployment start servers; decisions 274–276).

For each ``--src`` (a checkout's ``src``), alternating, ``--rounds`` times: a fresh data
directory (keys generated, the schema migrated) and then a restart on it (nothing to
migrate). The figure is the server process's own user + system CPU seconds read from
``/proc/PID/stat`` once ``/healthz`` answers 200, which, unlike wall time, hardly moves
with this VM's load. Prints the medians per checkout and case, and their ratio to the
first ``--src``.

    python bench/serve_startup.py --src ../wt-base/src --src src --rounds 5
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

IKM_HEX = bytes(range(32)).hex()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_cpu(src: Path, data: Path) -> float:
    """Start ``warden serve`` from ``src`` on ``data``; its CPU seconds once ready."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "warden", "serve", "--port", str(port), "--data-dir", str(data),
         "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"warden serve from {src} exited with {proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return _cpu_seconds(proc.pid)
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError(f"warden serve from {src} did not start")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cpu: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.rounds):
        for i, src in enumerate(args.src):
            data = Path(tempfile.mkdtemp(prefix="warden-startup-"))
            key = data / "ikm.key"
            key.write_text(IKM_HEX)
            key.chmod(0o600)
            cpu.setdefault((i, "fresh"), []).append(start_cpu(src.resolve(), data))
            cpu.setdefault((i, "restart"), []).append(start_cpu(src.resolve(), data))
    print(f"{'checkout':<40} {'case':<8} {'median cpu s':>12} {'min':>6} {'max':>6} {'÷ first':>8}")
    for case in ("fresh", "restart"):
        first = statistics.median(cpu[(0, case)])
        for i, src in enumerate(args.src):
            xs = cpu[(i, case)]
            med = statistics.median(xs)
            print(
                f"{str(src):<40} {case:<8} {med:>12.2f} {min(xs):>6.2f} {max(xs):>6.2f} "
                f"{med / first:>8.2f}"
            )


if __name__ == "__main__":
    main()
