"""ACS decision benchmark (issue 2): in-process latency and HTTP throughput.

In process: N signed ``steps/toolCallRequest`` envelopes are built first (the
client's signing is not Warden's cost), then each is handed to
``AcsService.handle`` and timed: parse, envelope schema, HMAC verify, policy
(a 100-rule bundle), ContextEntry chained and committed to SQLite, response
signed. The baseline, run in the same process on the same envelopes' shape,
is ``system/ping`` (parse, schema, no policy, no store). Reported: median, p99,
p99.9 and mean in µs, and the ratio to the baseline median.

Over HTTP: ``warden serve`` in a subprocess; client processes send pre-signed
requests on keep-alive connections (stdlib http.client) from several threads,
each thread its own session. Reported: decisions/s and client-side latency.

    python bench/acs_decision.py                      # defaults: 20000 decisions
    python bench/acs_decision.py --decisions 5000 --skip-http
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from warden.runtime import Runtime
from warden.settings import Settings
from warden.wire.acs.client import AcsClient

IKM = bytes(range(32))
ROOT = Path(__file__).resolve().parent.parent


def bundle_100_rules() -> str:
    """A 100-rule bundle: lifecycle, 96 rules on other tools, 3 on the measured tool."""
    rules = [
        "  - id: lifecycle\n    hooks: [steps/sessionStart, steps/sessionEnd]\n    effect: allow\n"
    ]
    for i in range(96):
        rules.append(
            f"  - id: other-{i}\n    tools: [other_tool_{i}]\n"
            f"    when: has(args.amount) && double(args.amount) > {i}.0\n"
            f"    effect: ask\n    reasoning: other tool {i} needs a human\n"
            "    ask: {question: 'ok?', approver: {type: human, id: ops}, timeout_seconds: 60}\n"
        )
    rules.append("  - id: read-allowed\n    tools: [read_file]\n    effect: allow\n")
    rules.append(
        "  - id: read-secrets\n    tools: [read_file]\n"
        "    when: has(args.path) && re_find(args.path, '^/etc/(shadow|sudoers)')\n"
        "    effect: deny\n    reasoning: secrets are off limits\n"
        "    reason_codes: [secret_path]\n"
    )
    rules.append(
        "  - id: read-large\n    tools: [read_file]\n"
        "    when: has(args.limit) && int(args.limit) > 1000000\n"
        "    effect: deny\n    reasoning: too large\n"
    )
    return "warden_bundle: 1\nid: bench-100\nversion: '1'\ndefault: deny\nrules:\n" + "".join(rules)


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    n = len(s)
    return {
        "median_us": statistics.median(s) * 1e6,
        "p99_us": s[min(n - 1, int(n * 0.99))] * 1e6,
        "p999_us": s[min(n - 1, int(n * 0.999))] * 1e6,
        "mean_us": statistics.fmean(s) * 1e6,
        "n": n,
    }


def write_key(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(IKM.hex())
    path.chmod(0o600)
    return path


def in_process(decisions: int, sync: str, workdir: Path) -> dict[str, Any]:
    data = workdir / f"inproc-{sync}"
    policy = workdir / "bench-100.yaml"
    rt = Runtime.start(
        Settings(
            data_dir=data, policy=policy, key_file=write_key(data / "ikm.key"), sqlite_sync=sync
        )  # type: ignore[arg-type]
    )
    try:
        client = AcsClient(rt.acs.handle, IKM, track_chain=False)
        assert "result" in client.hello()
        assert client.call("steps/sessionStart", {})["result"]["decision"] == "allow"
        bodies = [
            json.dumps(
                client.envelope(
                    "steps/toolCallRequest",
                    {
                        "tool": {"name": "read_file"},
                        "arguments": {
                            "path": {"value": f"/srv/data/{i}.txt"},
                            "limit": {"value": 4096},
                        },
                    },
                )
            ).encode()
            for i in range(decisions)
        ]
        pings = [
            json.dumps(client.envelope("system/ping", {"echo": str(i)})).encode()
            for i in range(decisions)
        ]
        handle = rt.acs.handle
        for b in pings[:200]:
            handle(b)  # warm-up
        gc.collect()
        ping_lat = []
        for b in pings:
            t0 = time.perf_counter()
            handle(b)
            ping_lat.append(time.perf_counter() - t0)
        lat = []
        last: dict[str, Any] = {}
        for b in bodies:
            t0 = time.perf_counter()
            last = handle(b)
            lat.append(time.perf_counter() - t0)
        assert last["result"]["decision"] == "allow", last
        assert rt.store.counts()["entries"] == decisions + 1
    finally:
        rt.close()
    d, p = percentiles(lat), percentiles(ping_lat)
    return {
        "sync": sync,
        "decision": d,
        "ping_baseline": p,
        "ratio_median": d["median_us"] / p["median_us"],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve(
    port: int, data: Path, policy: Path, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """Start ``warden serve`` on ``port`` (data dir ``data``, bundle ``policy``, warnings
    only) with ``extra`` options, its output appended to ``log``. The caller waits with
    :func:`wait_ready` and stops it."""
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "warden", "serve", "--port", str(port), "--data-dir",
             str(data), "--policy", str(policy), "--log-level", "warning", *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def wait_ready(port: int, timeout_s: float = 60.0) -> None:
    """Poll ``/healthz`` on ``port`` until it answers 200; OSError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _client_proc(
    ports: int | list[int],
    threads: int,
    per_thread: int,
    q: Any,
    mode: str = "sticky",
    offset: int = 0,
) -> None:
    """One client process: ``threads`` sessions, each on keep-alive connections to
    ``ports`` (one Warden, or several replicas). ``sticky``: thread ``t`` keeps to
    replica ``(offset + t) % n``; ``round-robin``: each request goes to the next one."""
    import threading

    port_list = [ports] if isinstance(ports, int) else ports
    results: list[tuple[int, list[float], int]] = []
    lock = threading.Lock()

    def run(t: int) -> None:
        conns = [http.client.HTTPConnection("127.0.0.1", p) for p in port_list]
        turn = [offset + t]

        def send(body: bytes) -> dict[str, Any]:
            conn = conns[turn[0] % len(conns)]
            if mode == "round-robin":
                turn[0] += 1
            conn.request("POST", "/acs", body, {"content-type": "application/json"})
            parsed: dict[str, Any] = json.loads(conn.getresponse().read())
            return parsed

        client = AcsClient(send, IKM, track_chain=False)
        client.hello()
        client.call("steps/sessionStart", {})
        bodies = [
            json.dumps(
                client.envelope(
                    "steps/toolCallRequest",
                    {
                        "tool": {"name": "read_file"},
                        "arguments": {"path": {"value": f"/srv/{uuid.uuid4()}"}},
                    },
                )
            ).encode()
            for _ in range(per_thread)
        ]
        barrier.wait()
        lat = []
        ok = 0
        for b in bodies:
            t0 = time.perf_counter()
            r = send(b)
            lat.append(time.perf_counter() - t0)
            ok += r.get("result", {}).get("decision") == "allow"
        with lock:
            results.append((len(bodies), lat, ok))

    barrier = threading.Barrier(threads + 1)
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    q.put((elapsed, [x for r in results for x in r[1]], sum(r[2] for r in results)))


def over_http(total: int, procs: int, threads: int, sync: str, workdir: Path) -> dict[str, Any]:
    data = workdir / f"http-{sync}"
    write_key(data / "ikm.key")
    port = _free_port()
    server = start_serve(
        port, data, workdir / "bench-100.yaml", workdir / f"serve-{sync}.log", "--sqlite-sync", sync
    )
    try:
        wait_ready(port)
        per_thread = total // (procs * threads)
        q: Any = mp.Queue()
        ps = [
            mp.Process(target=_client_proc, args=(port, threads, per_thread, q))
            for _ in range(procs)
        ]
        for p in ps:
            p.start()
        outs = [q.get(timeout=600) for _ in ps]
        for p in ps:
            p.join()
    finally:
        server.terminate()
        server.wait(10)
    wall = max(o[0] for o in outs)
    lat = [x for o in outs for x in o[1]]
    allowed = sum(o[2] for o in outs)
    return {
        "sync": sync,
        "clients": f"{procs} processes x {threads} threads",
        "decisions": len(lat),
        "allowed": allowed,
        "decisions_per_s": len(lat) / wall,
        "latency": percentiles(lat),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=20_000)
    ap.add_argument("--http-decisions", type=int, default=20_000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sync", nargs="+", default=["NORMAL", "FULL"])
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bench-100.yaml").write_text(bundle_100_rules())
        out["in_process"] = [in_process(args.decisions, s, work) for s in args.sync]
        if not args.skip_http:
            out["http"] = [
                over_http(args.http_decisions, args.procs, args.threads, s, work) for s in args.sync
            ]
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
