"""How large the SQLite WAL grows under back-to-back asks (decision 311).

Each ``--warden-src`` checkout runs, in a subprocess of its own, an in-process Warden
(SQLite, ``sqlite_sync=NORMAL``, the shipped default bundle) that answers ``--steps``
ACS steps one after another with no pause, through ``AcsService.handle`` as the tests'
``service_client`` drives it. Every 100 steps the size of ``warden.db-wal`` is read;
the largest is printed per checkout with the time taken. The checkouts alternate for
``--runs`` runs, so they share the machine's conditions.

    python bench/wal_growth.py --warden-src /work/main/src --label main \\
        --warden-src src --label after --steps 3000 --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from conftest import DEFAULT_POLICY, migrated_sqlite, service_client, write_key
from warden.runtime import Runtime
from warden.settings import Settings

steps = int(sys.argv[1])
data = Path(tempfile.mkdtemp()) / "d"
key = write_key(data / "ikm.key")
migrated_sqlite(data / "warden.db")
rt = Runtime.start(
    Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=key, sqlite_sync="NORMAL")
)
acs = service_client(rt)
acs.hello()
acs.call("steps/sessionStart", {})
wal = data / "warden.db-wal"
largest = 0
started = time.perf_counter()
for i in range(steps):
    acs.tool_call("read_file", {"path": f"/tmp/{i}"})
    if i % 100 == 0:
        largest = max(largest, wal.stat().st_size)
elapsed = time.perf_counter() - started
largest = max(largest, wal.stat().st_size)
rt.close()
print(json.dumps({"largest_wal_bytes": largest, "seconds": elapsed}))
"""


def _run(src: Path, steps: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(steps), str(ROOT / "tests")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warden-src", type=Path, action="append", required=True)
    parser.add_argument("--label", action="append", required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    if len(args.label) != len(args.warden_src):
        parser.error("give one --label per --warden-src")
    print(f"{'run':>3} {'checkout':<10} {'steps':>6} {'largest WAL (MB)':>17} {'seconds':>8}")
    for run in range(1, args.runs + 1):
        for label, src in zip(args.label, args.warden_src, strict=True):
            got = _run(src.resolve(), args.steps)
            mb = got["largest_wal_bytes"] / 1e6
            print(f"{run:>3} {label:<10} {args.steps:>6} {mb:>17.1f} {got['seconds']:>8.1f}")


if __name__ == "__main__":
    main()
