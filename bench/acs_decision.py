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

With ``--compare-src OTHER/src`` it measures HTTP only, for two checkouts in one run:
one server per checkout (this checkout's, or ``--src``, labelled ``after``; the other
labelled ``before``), rounds alternating between them, and reports after ÷ before for
decisions/s and the median latency.

The load generator (issue 16, fourth session). The client processes run on the same
cores as the servers, so what they spend per decision is taken from the server under
test and compresses any difference between checkouts. With ``--compare-src`` the timed
requests are sent by default by :class:`RawAcsConnection` (``--client raw``): each
request's bytes (request line, headers, the signed body) are built before the timing and
sent in one ``sendall`` on a keep-alive socket, the answer read to its Content-Length and
parsed with ``json.loads`` to count the allows: ~80–90 µs of client CPU per decision
(body signing included) against ~220–300 µs through ``http.client``
(``--client http.client``, the sender of earlier sessions' figures). What is measured is
unchanged: every timed request is a signed step of a session the client opened with
``handshake/hello`` and ``steps/sessionStart``, authenticated, decided, committed and
answered signed by ``warden serve``. Every client process also starts its timed part at
once (a ``multiprocessing`` barrier), and a round's wall time runs from the first start
to the last end (before, each process timed itself and the longest counted, so a process
that set up sooner could run partly alone).

    python bench/acs_decision.py                      # defaults: 20000 decisions
    python bench/acs_decision.py --decisions 5000 --skip-http
    python bench/acs_decision.py --compare-src ../wt-before/src --sync NORMAL
    python bench/acs_decision.py --compare-src ../wt-before/src --src src --sync NORMAL \
        --http-decisions 2000 --rounds 6 [--client http.client]
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

from warden.crypto.hmac_keys import derive_agent_ikm
from warden.runtime import Runtime
from warden.settings import Settings
from warden.wire.acs.client import AcsClient

IKM = bytes(range(32))
ROOT = Path(__file__).resolve().parent.parent
#: The registered agent the benchmark signs as (issue 15: agents sign with their own key,
#: derived from the master IKM; the master IKM is no agent credential).
AGENT_ID = "bench-agent"
AGENT_KEY_ID = "agk_" + "b" * 16
AGENT_IKM = derive_agent_ikm(IKM, AGENT_KEY_ID)


def register_agent(database_url: str) -> None:
    """Register the benchmark's agent in the database at ``database_url`` (created and
    migrated if need be) unless it is there."""
    from warden.identity.agents import AgentRegistry
    from warden.store import open_store

    store = open_store(database_url)
    try:
        registry = AgentRegistry(store, IKM)
        if registry.get(AGENT_ID) is None:
            registry.add(AGENT_ID, "bench", key_id=AGENT_KEY_ID)
    finally:
        store.close()


def agent_client(send: Any) -> AcsClient:
    """A client signing as the benchmark's registered agent."""
    return AcsClient(send, AGENT_IKM, agent_id=AGENT_ID, key_id=AGENT_KEY_ID, track_chain=False)


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


def read_file_bodies(client: AcsClient, n: int) -> list[bytes]:
    """``n`` signed ``steps/toolCallRequest`` bodies for ``read_file`` of distinct paths
    (the 100-rule bundle allows them), built before timing: the client's signing is not
    Warden's cost."""
    return [
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
        for i in range(n)
    ]


def in_process(decisions: int, sync: str, workdir: Path) -> dict[str, Any]:
    data = workdir / f"inproc-{sync}"
    policy = workdir / "bench-100.yaml"
    rt = Runtime.start(
        Settings(
            data_dir=data, policy=policy, key_file=write_key(data / "ikm.key"), sqlite_sync=sync
        )  # type: ignore[arg-type]
    )
    try:
        register_agent(rt.settings.resolved_database_url())
        client = agent_client(rt.acs.handle)
        assert "result" in client.hello()
        assert client.call("steps/sessionStart", {})["result"]["decision"] == "allow"
        bodies = read_file_bodies(client, decisions)
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
    port: int, data: Path, policy: Path, log: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``warden serve`` on ``port`` (data dir ``data``, bundle ``policy``, warnings
    only) with ``extra`` options, its output appended to ``log``, in environment ``env``
    (default: this process's; ``PYTHONPATH`` picks the checkout). The caller waits with
    :func:`wait_ready` and stops it."""
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "warden", "serve", "--port", str(port), "--data-dir",
             str(data), "--policy", str(policy), "--log-level", "warning", *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip


def wait_ready(port: int, timeout_s: float = 60.0) -> None:
    """Poll ``/healthz`` on ``port`` until it answers 200; OSError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            try:
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    return
            finally:
                c.close()
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
    client: str = "http.client",
    start: Any = None,
) -> None:
    """One client process: ``threads`` sessions, each on keep-alive connections to
    ``ports`` (one Warden, or several replicas). ``sticky``: thread ``t`` keeps to
    replica ``(offset + t) % n``; ``round-robin``: each request goes to the next one.
    ``client``: what sends the timed requests, ``http.client`` (the stdlib's) or
    ``raw`` (:class:`RawAcsConnection`); the untimed handshake always uses the stdlib's.
    ``start``: a ``multiprocessing.Barrier`` of all the client processes, passed once every
    thread of this one is ready, so that every process's timed part starts together.
    Puts (seconds, latencies, allowed, started, ended) on ``q``, the last two by
    ``time.perf_counter`` (CLOCK_MONOTONIC: comparable across processes)."""
    import threading

    port_list = [ports] if isinstance(ports, int) else ports
    use_raw = client == "raw"
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

        raws: list[RawAcsConnection] = []  # opened just before the timing

        def send_timed(body: bytes) -> dict[str, Any]:
            """The timed part's sender: ``send``, or the raw-socket client on its own
            keep-alive connections (``body`` is then the whole request)."""
            if not raws:
                return send(body)
            raw = raws[turn[0] % len(raws)]
            if mode == "round-robin":
                turn[0] += 1
            parsed: dict[str, Any] = json.loads(raw.post(body))
            return parsed

        client = agent_client(send)
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
        if use_raw:
            # Each request's bytes (request line, headers, body) built before the timing;
            # the connections opened last, so none idles into the server's keep-alive
            # timeout while the sessions are set up.
            bodies = [RawAcsConnection.request(b) for b in bodies]
            raws.extend(RawAcsConnection(p) for p in port_list)
        ready.wait()
        go.wait()
        lat = []
        ok = 0
        for b in bodies:
            t0 = time.perf_counter()
            r = send_timed(b)
            lat.append(time.perf_counter() - t0)
            ok += r.get("result", {}).get("decision") == "allow"
        for raw in raws:
            raw.sock.close()
        with lock:
            results.append((len(bodies), lat, ok))

    ready = threading.Barrier(threads + 1)
    go = threading.Barrier(threads + 1)
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    ready.wait()  # every thread has its session and its signed bodies
    if start is not None:
        start.wait()  # ... in every client process
    go.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    t1 = time.perf_counter()
    q.put((t1 - t0, [x for r in results for x in r[1]], sum(r[2] for r in results), t0, t1))


class RawAcsConnection:
    """A lean HTTP/1.1 client for the timed requests: one keep-alive TCP connection
    (``TCP_NODELAY``), each request's bytes built before the timing (:meth:`request`),
    sent in one ``sendall``; the answer read until its headers end and then exactly
    ``Content-Length`` body bytes. It costs the client processes, which share the
    machine's cores with the servers, a fraction of the stdlib's ``http.client``
    (header objects, ``email`` parsing, buffered file reads) per request. Only what a
    ``warden serve`` ACS answer is, is accepted: status 200 with a Content-Length and no
    chunked body (anything else raises)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    @staticmethod
    def request(body: bytes) -> bytes:
        """The whole ``POST /acs`` request for ``body``."""
        return (
            "POST /acs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("ascii") + body

    def post(self, request: bytes) -> bytes:
        """Send ``request`` (from :meth:`request`); return the answer's body."""
        self.sock.sendall(request)
        recv = self.sock.recv
        buf = self.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            chunk = recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buf += chunk
        head = buf[:end].decode("latin-1").split("\r\n")
        if not head[0].startswith("HTTP/1.1 200 "):
            raise ConnectionError(f"unexpected answer: {head[0]!r}")
        length = -1
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
            elif name.strip().lower() == "transfer-encoding":
                raise ConnectionError("a chunked answer")
        if length < 0:
            raise ConnectionError("an answer without Content-Length")
        start = end + 4
        while len(buf) < start + length:
            chunk = recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buf += chunk
        self.buf = buf[start + length :]
        return buf[start : start + length]


def _http_load(
    port: int, total: int, procs: int, threads: int, client: str = "http.client"
) -> tuple[float, list[float], int]:
    """``total`` decisions from ``procs`` client processes × ``threads`` threads against
    the Warden on ``port``, sent by ``client`` (see :func:`_client_proc`): (wall seconds,
    client latencies in s, decisions allowed). The processes start their timed parts
    together, and the wall time runs from the first start to the last end: a process
    that set up faster cannot run ahead alone and count its decisions twice over."""
    per_thread = total // (procs * threads)
    q: Any = mp.Queue()
    start = mp.Barrier(procs)
    ps = [
        mp.Process(
            target=_client_proc,
            args=(port, threads, per_thread, q, "sticky", 0, client, start),
        )
        for _ in range(procs)
    ]
    for p in ps:
        p.start()
    outs = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    wall = max(o[4] for o in outs) - min(o[3] for o in outs)
    return wall, [x for o in outs for x in o[1]], sum(o[2] for o in outs)


def over_http(total: int, procs: int, threads: int, sync: str, workdir: Path) -> dict[str, Any]:
    data = workdir / f"http-{sync}"
    write_key(data / "ikm.key")
    register_agent(f"sqlite:///{data / 'warden.db'}")
    port = _free_port()
    server = start_serve(
        port, data, workdir / "bench-100.yaml", workdir / f"serve-{sync}.log", "--sqlite-sync", sync
    )
    try:
        wait_ready(port)
        wall, lat, allowed = _http_load(port, total, procs, threads)
    finally:
        server.terminate()
        server.wait(10)
    return {
        "sync": sync,
        "clients": f"{procs} processes x {threads} threads",
        "decisions": len(lat),
        "allowed": allowed,
        "decisions_per_s": len(lat) / wall,
        "latency": percentiles(lat),
    }


def _register_with(src: Path, database_url: str) -> None:
    """Register the benchmark's agent with the Warden of checkout ``src`` (its own
    migrations create the database, so an older checkout never opens a newer schema)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--register-agent", database_url],
        env=env,
        check=True,
    )


def compare_http(
    checkouts: dict[str, Path], ns: argparse.Namespace, sync: str, workdir: Path
) -> dict[str, Any]:
    """HTTP throughput of several checkouts in one run: one ``warden serve`` per
    checkout (``PYTHONPATH`` = its src), all started first; then ``ns.rounds`` rounds,
    each sending ``ns.http_decisions / ns.rounds`` decisions to every server in turn,
    the order rotating by round so that none is always first. Reports each checkout's
    decisions/s over all its rounds and latency, and the ratios to the first checkout
    (also the median over rounds of the per-round decisions/s ratio)."""
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    walls: dict[str, float] = dict.fromkeys(checkouts, 0.0)
    lats: dict[str, list[float]] = {label: [] for label in checkouts}
    allowed: dict[str, int] = dict.fromkeys(checkouts, 0)
    per_round: dict[str, list[float]] = {label: [] for label in checkouts}
    round_size = ns.http_decisions // ns.rounds
    try:
        for label, src in checkouts.items():
            data = workdir / f"http-{sync}-{label}"
            write_key(data / "ikm.key")
            _register_with(src, f"sqlite:///{data / 'warden.db'}")
            port = _free_port()
            log = workdir / f"serve-{sync}-{label}.log"
            server = start_serve(
                port, data, workdir / "bench-100.yaml", log, "--sqlite-sync", sync,
                env={**os.environ, "PYTHONPATH": str(src)},
            )  # fmt: skip
            servers[label] = (server, port)
        for _server, port in servers.values():
            wait_ready(port)
        labels = list(checkouts)
        for r in range(ns.rounds):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                wall, lat, ok = _http_load(
                    servers[label][1], round_size, ns.procs, ns.threads, ns.client
                )
                per_round[label].append(len(lat) / wall)
                walls[label] += wall
                lats[label].extend(lat)
                allowed[label] += ok
    finally:
        for server, _port in servers.values():
            server.terminate()
            server.wait(10)
    runs = {
        label: {
            "src": str(checkouts[label]),
            "decisions": len(lats[label]),
            "allowed": allowed[label],
            "decisions_per_s": len(lats[label]) / walls[label],
            "decisions_per_s_by_round": per_round[label],
            "latency": percentiles(lats[label]),
        }
        for label in checkouts
    }
    first = labels[0]
    return {
        "sync": sync,
        "clients": f"{ns.procs} processes x {ns.threads} threads, {ns.client}",
        "rounds": ns.rounds,
        "checkouts": runs,
        "ratios": {
            f"{label} / {first}": {
                "decisions_per_s": runs[label]["decisions_per_s"] / runs[first]["decisions_per_s"],
                # Rounds close in time paired: less sensitive to the VM's slow phases.
                "decisions_per_s_median_of_rounds": statistics.median(
                    a / b for a, b in zip(per_round[label], per_round[first], strict=True)
                ),
                "median_latency": runs[label]["latency"]["median_us"]
                / runs[first]["latency"]["median_us"],
            }
            for label in labels[1:]
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=20_000)
    ap.add_argument("--http-decisions", type=int, default=20_000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sync", nargs="+", default=["NORMAL", "FULL"])
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument(
        "--compare-src",
        type=Path,
        help="HTTP only: also serve the checkout whose src folder this is (labelled "
        "before) and alternate rounds between it and --src (after)",
    )
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="with --compare-src")
    ap.add_argument("--rounds", type=int, default=10, help="with --compare-src")
    ap.add_argument(
        "--client",
        choices=["raw", "http.client"],
        default="raw",
        help="with --compare-src: what sends the timed requests (default raw: prebuilt "
        "request bytes on a keep-alive socket; http.client: the stdlib's, as before "
        "issue 16's fourth session)",
    )
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--register-agent", metavar="DATABASE_URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.register_agent:
        register_agent(args.register_agent)
        return
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bench-100.yaml").write_text(bundle_100_rules())
        if args.compare_src is not None:
            checkouts = {"before": args.compare_src.resolve(), "after": args.src.resolve()}
            out["http_compare"] = [compare_http(checkouts, args, s, work) for s in args.sync]
            print_comparison(out["http_compare"])
        else:
            out["in_process"] = [in_process(args.decisions, s, work) for s in args.sync]
            if not args.skip_http:
                out["http"] = [
                    over_http(args.http_decisions, args.procs, args.threads, s, work)
                    for s in args.sync
                ]
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


def print_comparison(runs: list[dict[str, Any]]) -> None:
    """One line per sync mode and checkout, then the ratios (on stderr: stdout is JSON)."""
    for run in runs:
        for label, r in run["checkouts"].items():
            lat = r["latency"]
            print(
                f"{run['sync']:6} {label:7} {r['decisions_per_s']:8.0f} decisions/s  "
                f"median {lat['median_us'] / 1000:.2f} ms  p99 {lat['p99_us'] / 1000:.2f} ms",
                file=sys.stderr,
            )
        for name, ratio in run["ratios"].items():
            print(
                f"{run['sync']:6} {name}: decisions/s {ratio['decisions_per_s']:.2f} "
                f"(median of rounds {ratio['decisions_per_s_median_of_rounds']:.2f}), "
                f"median latency {ratio['median_latency']:.2f}",
                file=sys.stderr,
            )


if __name__ == "__main__":
    main()
