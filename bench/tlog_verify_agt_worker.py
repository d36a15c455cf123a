"""The AGT side of ``bench/tlog_verify_side_by_side.py``; run with the peers' Python.

Writes ``--entries`` audit records through Microsoft AGT 5.0.0's public API the way
``../shared/peers/bench_agt.py`` does (``AuditLog`` with a ``FileAuditSink``: JSONL,
SHA-256 chain, HMAC-SHA256; and an in-memory ``AuditLog``), then prints
``{"ready": true, "entries": n, "bytes_per_entry": b}``. Each ``{"cmd": "verify"}`` on
stdin times ``HashChainVerifier().verify_file`` (the file) and
``AuditLog.verify_integrity`` (in memory) once each and prints ``{"file_s": s,
"memory_s": s, "ok": [bool, bool]}``; ``{"cmd": "quit"}`` ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, required=True)
    ap.add_argument("--workdir", required=True)
    ns = ap.parse_args()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the protocol owns stdout
    warnings.filterwarnings("ignore")
    from agentmesh.governance import AuditLog, FileAuditSink, HashChainVerifier

    path = os.path.join(ns.workdir, "agt-audit.jsonl")
    if os.path.exists(path):
        os.remove(path)
    key = b"k" * 32
    file_log = AuditLog(sink=FileAuditSink(path, key))
    mem_log = AuditLog()
    for i in range(ns.entries):
        for log in (file_log, mem_log):
            log.log(
                event_type="policy_evaluation",
                agent_did="did:mesh:agent-7",
                action="payments.transfer",
                outcome="allow",
                policy_decision="allow",
                data={"rule": f"r{i % 20}", "reason": "matched", "i": i},
            )
    sink = getattr(file_log, "_sink", None) or getattr(file_log, "sink", None)
    for name in ("flush", "close"):
        if sink is not None and hasattr(sink, name):
            getattr(sink, name)()
    with open(path) as fh:
        lines = sum(1 for _ in fh)
    out.write(
        json.dumps(
            {
                "ready": True,
                "entries": lines,
                "memory_entries": len(mem_log._chain._entries),
                "bytes_per_entry": round(os.path.getsize(path) / max(lines, 1), 1),
            }
        )
        + "\n"
    )
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") != "verify":
            break
        t0 = time.perf_counter()
        ok_file = HashChainVerifier().verify_file(path, key)[0]
        t1 = time.perf_counter()
        ok_mem = mem_log.verify_integrity()[0]
        t2 = time.perf_counter()
        out.write(
            json.dumps({"file_s": t1 - t0, "memory_s": t2 - t1, "ok": [ok_file, ok_mem]}) + "\n"
        )


if __name__ == "__main__":
    main()
