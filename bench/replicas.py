"""Scale-out benchmark (issue 7): ACS decisions/s and latency, 1 vs 3 replicas on
PostgreSQL, against the SQLite default.

Each case starts real ``warden serve`` processes (the 100-rule bundle of
``acs_decision.py``) sharing one data directory and one database: the SQLite file
(one replica, ``synchronous=FULL``), or a fresh PostgreSQL schema (dropped afterwards)
with 1 or 3 replicas. Client processes send pre-signed ``steps/toolCallRequest``
envelopes on keep-alive connections, each thread its own session; in the ``sticky``
mode a session stays on one replica (a load balancer with session affinity), in
``round-robin`` each request goes to the next replica (no affinity: the replicas
take turns appending to one chain). Reported per case: decisions/s, client-side
median / p99 / p99.9 latency, and the ratio of throughput to the SQLite case measured
in the same run.

    python bench/replicas.py --json bench/out/replicas.json
    python bench/replicas.py --decisions 6000 --postgres postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acs_decision import (
    _client_proc,
    _free_port,
    bundle_100_rules,
    percentiles,
    start_serve,
    wait_ready,
    write_key,
)
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


@contextmanager
def pg_schema(base: str) -> Iterator[str]:
    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE SCHEMA "{name}"'))
    try:
        url = make_url(base).set(drivername="postgresql+psycopg")
        yield url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(
            hide_password=False
        )
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


@contextmanager
def replicas(n: int, database_url: str, data: Path, policy: Path) -> Iterator[list[int]]:
    write_key(data / "ikm.key")
    ports = [_free_port() for _ in range(n)]
    procs = []
    for port in ports:
        log = data / f"serve-{port}.log"
        procs.append(start_serve(port, data, policy, log, "--database-url", database_url))
    try:
        for port in ports:
            wait_ready(port)
        yield ports
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(15)


def drive(ports: list[int], total: int, procs: int, threads: int, mode: str) -> dict[str, Any]:
    per_thread = total // (procs * threads)
    q: Any = mp.Queue()
    ps = [
        mp.Process(target=_client_proc, args=(ports, threads, per_thread, q, mode, i * threads))
        for i in range(procs)
    ]
    for p in ps:
        p.start()
    outs = [q.get(timeout=900) for _ in ps]
    for p in ps:
        p.join()
    wall = max(o[0] for o in outs)
    lat = [x for o in outs for x in o[1]]
    return {
        "decisions": len(lat),
        "allowed": sum(o[2] for o in outs),
        "decisions_per_s": len(lat) / wall,
        "latency": percentiles(lat),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=12_000, help="per case")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="warden-bench-replicas-"))
    policy = work / "bench-100.yaml"
    policy.write_text(bundle_100_rules())
    cases: list[dict[str, Any]] = []

    def case(name: str, n: int, url: str, mode: str) -> None:
        data = work / name.replace(" ", "-")
        with replicas(n, url, data, policy) as ports:
            drive(ports, 600, 1, 2, mode)  # warm-up: imports, caches, connections
            out = drive(ports, args.decisions, args.procs, args.threads, mode)
        out.update(case=name, replicas=n, mode=mode)
        cases.append(out)
        lat = out["latency"]
        print(
            f"{name:<34} {out['decisions_per_s']:>8,.0f}/s  median {lat['median_us'] / 1e3:.2f} ms"
            f"  p99 {lat['p99_us'] / 1e3:.2f} ms  p99.9 {lat['p999_us'] / 1e3:.2f} ms"
            f"  allowed {out['allowed']}/{out['decisions']}",
            flush=True,
        )

    case("SQLite (FULL), 1 replica", 1, f"sqlite:///{work / 'sqlite' / 'warden.db'}", "sticky")
    for n, mode in ((1, "sticky"), (3, "sticky"), (3, "round-robin")):
        with pg_schema(args.postgres) as url:
            case(f"PostgreSQL, {n} replica{'s' if n > 1 else ''}, {mode}", n, url, mode)
    base = cases[0]["decisions_per_s"]
    for c in cases:
        c["ratio_to_sqlite"] = c["decisions_per_s"] / base
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cases": cases}, indent=2))


if __name__ == "__main__":
    main()
