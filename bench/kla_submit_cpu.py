"""CPU per ``POST /v1/action-requests`` on SQLite (decision 931: the submit reads which
chain the principal's records of the execution go on, one more ``SELECT`` on SQLite).

In process through the ASGI app (``TestClient``), the KLA schema's ``basic-read`` example
with a fresh id, one execution throughout, the peers' scenario bundle, SQLite ``FULL``.
Each checkout runs in a child process importing Warden from its ``src``; the checkouts
are interleaved, ``--rounds`` times each; each round reports the median CPU
(``time.process_time``) of ``--n`` submits after ``--warmup``; the medians of the rounds
are printed.

    python bench/kla_submit_cpu.py --warden-src ../base/src --warden-src src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def measure(n: int, warmup: int) -> dict[str, Any]:
    from fastapi.testclient import TestClient
    from warden_case import AGENT_ID, ScenarioWarden

    import warden
    from warden.identity.api_keys import Role
    from warden.server.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        sw = ScenarioWarden(Path(tmp), HERE / "scenario-20-rules.yaml", sync="FULL")
        rt = sw.runtime
        example = Path(warden.__file__).parent / "schemas/kla/examples/basic-read.json"
        record = json.loads(example.read_text(encoding="utf-8"))
        execution = f"exec_bench_{uuid.uuid4().hex[:12]}"
        _, token = rt.api_keys.create(AGENT_ID, Role.AGENT)
        headers = {"Authorization": f"Bearer {token}"}
        times: list[float] = []
        with TestClient(create_app(rt)) as client:
            for i in range(warmup + n):
                body = {
                    **record,
                    "action_request_id": f"req_bench_{uuid.uuid4().hex}",
                    "correlation": {**record["correlation"], "execution_id": execution},
                    "requested_at": datetime.now(UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
                }
                t0 = time.process_time()
                r = client.post("/v1/action-requests", json=body, headers=headers)
                t1 = time.process_time()
                if r.status_code != 200:
                    raise SystemExit(f"submit answered {r.status_code}: {r.text}")
                if i >= warmup:
                    times.append((t1 - t0) * 1e6)
        sw.close()
    return {"warden": warden.__file__, "median_us": statistics.median(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warden-src", type=Path, action="append")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.inner:
        print(json.dumps(measure(ns.n, ns.warmup)))
        return
    srcs = [p.resolve() for p in (ns.warden_src or [HERE.parent / "src"])]
    rounds: dict[Path, list[float]] = {s: [] for s in srcs}
    for _ in range(ns.rounds):
        for src in srcs:
            env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
            args = [sys.executable, __file__, "--inner", "--n", str(ns.n),
                    "--warmup", str(ns.warmup)]  # fmt: skip
            done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"measuring {src} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if not Path(result["warden"]).is_relative_to(src):
                raise SystemExit(f"the child imported {result['warden']}, not {src}")
            rounds[src].append(result["median_us"])
    for src, values in rounds.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"{src}: median {statistics.median(values):.0f} us CPU per submit ({shown})")


if __name__ == "__main__":
    main()
