"""Provenance isolation benchmark (issue 14 item 8): can one session's provenance graph
slow the others down?

``warden serve`` runs in a subprocess with a provenance bundle (FIDES and CaMeL on, an
allow-all rule set). Ordinary sessions (one client process, ``--threads`` sessions on
keep-alive connections) make consequential ``send_money`` calls whose arguments carry
provenance from the user's message, in a closed loop:

1. *alone* for ``--seconds``;
2. *with a hostile session* (another client process) that grows its graph to the
   default node limit (20,000) in 1,000-node ``toolCallResult`` steps (each output
   derived from the previous step's), then keeps sending 1,000-node steps that are
   refused at the limit and consequential calls over its full graph, until the
   ordinary sessions have run as long again.

3. *beside a control* for ``--seconds``: requests of the same size as the hostile's
   steps that add no node (one argument without provenance holding the same rows), to
   tell what graph size costs the others from what request size costs them.

Reported: the ordinary sessions' p50/p99 latency in each phase and the ratios to the
first; the server CPU time (``/proc/<pid>/stat``) of each 1,000-node step, measured
afterwards with only a fresh hostile session running (first and last step, median); the
server's RSS growth over the hostile phases.

    python bench/provenance_isolation.py --json bench/out/provenance_isolation.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from acs_decision import IKM, _free_port, percentiles, start_serve, wait_ready, write_key

from warden.wire.acs.client import AcsClient

BUNDLE = """\
warden_bundle: 1
id: bench-provenance
version: '1'
default: allow
rules:
  - id: everything
    hooks: ["steps/*"]
    effect: allow
provenance:
  consequential_tools: [send_money]
  gates:
    fides: {enabled: true, p_t: ask}
    camel: {enabled: true, on_violation: deny}
"""
STEP_NODES = 1000
SESSION_NODES = 20_000
_TICK = os.sysconf("SC_CLK_TCK")


def server_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def server_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmRSS")


def _client(port: int) -> tuple[AcsClient, http.client.HTTPConnection]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def send(body: bytes) -> dict[str, Any]:
        conn.request("POST", "/acs", body, {"content-type": "application/json"})
        parsed: dict[str, Any] = json.loads(conn.getresponse().read())
        return parsed

    client = AcsClient(send, IKM, track_chain=False)
    assert "result" in client.hello(provenance_producer="deterministic")
    client.call("steps/sessionStart", {})
    user = {
        "type": "text",
        "value": "pay my rent to GB00LANDLORD",
        "provenance": {"provenance_id": "u-1", "origin": "user_input"},
    }
    assert client.call("steps/userMessage", {"content": [user]})["result"]["decision"] == "allow"
    return client, conn


def _pay(client: AcsClient, i: int) -> dict[str, Any]:
    return {
        "tool": {"name": "send_money"},
        "arguments": {
            "recipient": {
                "value": "GB00LANDLORD",
                "provenance": {
                    "provenance_id": f"a-{i}",
                    "origin": "agent_generated",
                    "derived_from": ["u-1"],
                },
            },
            "amount": {
                "value": 900,
                "provenance": {
                    "provenance_id": f"m-{i}",
                    "origin": "agent_generated",
                    "derived_from": ["u-1"],
                },
            },
        },
    }


def _send_timed(client: AcsClient, method: str, payload: dict[str, Any]) -> tuple[float, Any]:
    body = json.dumps(client.envelope(method, payload)).encode()
    t0 = time.perf_counter()
    r = client.transport(body)
    return time.perf_counter() - t0, r


def ordinary_proc(port: int, threads: int, seconds: float, q: Any) -> None:
    """``threads`` ordinary sessions deciding in a closed loop for ``seconds``."""
    lat: list[float] = []
    decisions: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def run(t: int) -> None:
        client, _ = _client(port)
        mine: list[float] = []
        seen: list[str] = []
        barrier.wait()
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            dt, r = _send_timed(client, "steps/toolCallRequest", _pay(client, i))
            mine.append(dt)
            seen.append(r.get("result", {}).get("decision", "error"))
            i += 1
        with lock:
            lat.extend(mine)
            decisions.extend(seen)

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    q.put((lat, decisions))


def _outputs(step: int) -> dict[str, Any]:
    outs = [
        {
            "value": f"row {step}-{j}",
            "provenance": {
                "provenance_id": f"h{step}-{j}",
                "origin": "tool_output",
                "derived_from": [f"h{step - 1}-{j}"] if step else [],
            },
        }
        for j in range(STEP_NODES)
    ]
    return {"tool": {"name": "read_file"}, "exit_status": "success", "outputs": outs}


def hostile_proc(port: int, stop_after: float, q: Any) -> None:
    """Grow one session to the node limit, then keep pressing until ``stop_after`` s."""
    client, _ = _client(port)
    started = time.monotonic()
    steps: list[float] = []
    step = 0
    for step in range(SESSION_NODES // STEP_NODES - 1):  # 2 nodes are the user's
        dt, r = _send_timed(client, "steps/toolCallResult", _outputs(step))
        assert r.get("result", {}).get("decision") == "allow", str(r)[:300]
        steps.append(dt)
    pressed = 0
    while time.monotonic() - started < stop_after:
        step += 1
        _send_timed(client, "steps/toolCallResult", _outputs(step))  # refused: over the limit
        _send_timed(client, "steps/toolCallRequest", _pay(client, step))
        pressed += 1
    q.put((steps, pressed))


def bulk_proc(port: int, seconds: float, q: Any) -> None:
    """The control: requests as large as the hostile's 1,000-node steps that add no
    node (one tool argument without provenance holding the same 1,000 rows)."""
    client, _ = _client(port)
    # The hostile step's outputs, provenance and all, as one plain value (same bytes).
    rows = _outputs(5)["outputs"]
    payload = {"tool": {"name": "read_file"}, "arguments": {"rows": {"value": rows}}}
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        _send_timed(client, "steps/toolCallRequest", payload)
        sent += 1
    q.put(sent)


def cpu_per_step(port: int, pid: int) -> list[float]:
    """Server CPU seconds of each 1,000-node step of a fresh session, nothing else running."""
    client, _ = _client(port)
    out = []
    for step in range(SESSION_NODES // STEP_NODES - 1):
        body = json.dumps(client.envelope("steps/toolCallResult", _outputs(step))).encode()
        c0 = server_cpu_s(pid)
        r = client.transport(body)
        out.append(server_cpu_s(pid) - c0)
        assert r.get("result", {}).get("decision") == "allow", str(r)[:300]
    return out


def graph_bytes(trace: bool) -> tuple[int, float]:
    """One session grown to the node limit in this process: the hostile's 19 steps
    through check, view, apply and summary, as the service runs them. Returns the bytes
    it keeps alive (tracemalloc; 0 unless ``trace``) and the CPU seconds of its last
    step (meaningful without ``trace``: tracing slows allocation)."""
    import gc
    import tracemalloc

    from warden.policy.bundle import parse_bundle
    from warden.provenance.facts import view_for
    from warden.provenance.graph import SessionProvenance

    spec = parse_bundle(BUNDLE).provenance
    assert spec is not None
    gc.collect()
    if trace:
        tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    state = SessionProvenance()
    last = 0.0
    for step in range(SESSION_NODES // STEP_NODES - 1):
        c0 = time.process_time()
        params = {"request_id": f"r{step}", "payload": _outputs(step)}
        method = "steps/toolCallResult"
        assert state.check(method, params, spec).problem is None
        view_for(state, spec, method, params, {}, {"name": "read_file"}).facts()
        state = state.applied(method, params, "allow")
        state.summary()
        last = time.process_time() - c0
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - start
    if trace:
        tracemalloc.stop()
    assert len(state.nodes) == SESSION_NODES - STEP_NODES
    return held, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=4, help="ordinary sessions")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        write_key(data / "ikm.key")
        policy = work / "bundle.yaml"
        policy.write_text(BUNDLE)
        port = _free_port()
        server = start_serve(port, data, policy, work / "serve.log", "--sqlite-sync", "NORMAL")
        try:
            wait_ready(port)
            q: Any = mp.Queue()
            # Phase 1: ordinary sessions alone.
            p = mp.Process(target=ordinary_proc, args=(port, args.threads, args.seconds, q))
            p.start()
            alone, dec_alone = q.get(timeout=900)
            p.join()
            # Phase 2: the same, with a hostile session growing to the limit.
            rss0 = server_rss_mib(server.pid)
            hq: Any = mp.Queue()
            h = mp.Process(target=hostile_proc, args=(port, args.seconds, hq))
            p = mp.Process(target=ordinary_proc, args=(port, args.threads, args.seconds, q))
            h.start()
            p.start()
            shared, dec_shared = q.get(timeout=1800)
            hostile_steps, pressed = hq.get(timeout=1800)
            p.join()
            h.join()
            rss1 = server_rss_mib(server.pid)
            # Control: the same ordinary load beside requests of the same size that add
            # no provenance node (what request size alone costs the others).
            bq: Any = mp.Queue()
            b = mp.Process(target=bulk_proc, args=(port, args.seconds, bq))
            p = mp.Process(target=ordinary_proc, args=(port, args.threads, args.seconds, q))
            b.start()
            p.start()
            control, _ = q.get(timeout=900)
            bulk_sent = bq.get(timeout=900)
            p.join()
            b.join()
            # Phase 3: CPU of each 1,000-node step, a fresh hostile session alone.
            cpu = cpu_per_step(port, server.pid)
            rss2 = server_rss_mib(server.pid)
        finally:
            server.terminate()
            server.wait(15)
    held, _ = graph_bytes(trace=True)
    _, last_step_cpu = graph_bytes(trace=False)
    a, s, c = percentiles(alone), percentiles(shared), percentiles(control)
    result = {
        "ordinary_alone": a,
        "ordinary_with_hostile": s,
        "p50_ratio": s["median_us"] / a["median_us"],
        "p99_ratio": s["p99_us"] / a["p99_us"],
        "ordinary_beside_same_size_requests_without_nodes": c,
        "control_p50_ratio": c["median_us"] / a["median_us"],
        "control_p99_ratio": c["p99_us"] / a["p99_us"],
        "control_requests_sent": bulk_sent,
        "ordinary_decisions": {
            "alone": {d: dec_alone.count(d) for d in set(dec_alone)},
            "with_hostile": {d: dec_shared.count(d) for d in set(dec_shared)},
        },
        "hostile_step_wall_s": {
            "first": hostile_steps[0],
            "last": hostile_steps[-1],
            "median": statistics.median(hostile_steps),
            "growth_steps": len(hostile_steps),
            "pressing_rounds_after_limit": pressed,
        },
        "step_cpu_s": {"first": cpu[0], "last": cpu[-1], "median": statistics.median(cpu)},
        "one_session_at_limit": {
            "graph_mib": held / 2**20,
            "last_step_cpu_s_in_process": last_step_cpu,
        },
        "server_rss_mib": {
            "before_hostile": rss0,
            "after_hostile": rss1,
            "after_second_hostile": rss2,
            "growth": rss2 - rss0,
        },
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
