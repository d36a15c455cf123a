"""Log verifier speed side by side (issue 17 item 6): Warden's transparency-log check
against Microsoft AGT 5.0.0's audit verifiers, on logs of equal size, in one run.

- ``warden``: what ``warden verify`` does for the log, in this process: read every leaf
  in index order from SQLite as stored bytes, hash it (RFC 9162 leaf hash, no
  re-canonicalization), build the tree, and check the signed checkpoint
  (:func:`warden.tlog.audit.check_log`).
- ``agt-file``: ``HashChainVerifier().verify_file`` over AGT's ``FileAuditSink`` JSONL
  (SHA-256 chain and HMAC-SHA256; needs the HMAC secret), in the peers' venv.
- ``agt-memory``: ``AuditLog.verify_integrity`` over AGT's in-memory chain, same process.

Equal size: both logs hold ``--entries`` entries, and Warden's leaves are padded to the
mean bytes per line of AGT's JSONL (read from the worker before Warden's log is built).
Each round runs the cases in a freshly shuffled order; the table gives the median and
the p99 (nearest rank; with few rounds, the slowest) of entries/s per case, and the
ratios Warden ÷ AGT of the medians and, paired per round, the median of the per-round
ratios. The peers' venv (see bench/side_by_side.py)::

    python3 -m venv bench/.peers && bench/.peers/bin/pip install \\
        agent-governance-toolkit-core==5.0.0 agent-governance-toolkit-protocols==5.0.0
    PYTHONPATH=src python bench/tlog_verify_side_by_side.py --entries 100000 --rounds 11
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.store import open_store, tlog_sql
from warden.tlog.audit import check_log
from warden.tlog.note import NoteSigner, NoteVerifier
from warden.tlog.service import TransparencyLog

HERE = Path(__file__).resolve().parent
WORKER = HERE / "tlog_verify_agt_worker.py"


def nearest_rank(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def build_warden(url: str, entries: int, leaf_bytes: int) -> tuple[Any, list[str], NoteVerifier]:
    """A store holding ``entries`` leaves of about ``leaf_bytes`` bytes, and its checkpoint."""
    store = open_store(url, sqlite_sync="NORMAL")
    # A leaf shaped like a decision record, padded to the target size.
    base = {
        "kind": "bench.decision",
        "agent_id": "agent-7",
        "tool": "payments.transfer",
        "decision": "allow",
        "rule": "r0",
        "i": 0,
        "pad": "",
    }
    pad = max(0, leaf_bytes - len(json.dumps(base, separators=(",", ":"))) - 16)
    for start in range(0, entries, 5000):
        with store.transaction() as tx:
            for i in range(start, min(start + 5000, entries)):
                tx.log_event(
                    "bench.decision", base | {"i": i, "rule": f"r{i % 20}", "pad": "x" * pad}
                )
    signer = NoteSigner("bench.invalid/log", Ed25519PrivateKey.generate())
    TransparencyLog(store.engine, signer).checkpoint()
    notes = [c.note for c in tlog_sql.all_checkpoints(store.engine)]
    return store, notes, NoteVerifier(signer.name, signer.public)


def mean_leaf_bytes(store: Any) -> float:
    with store.engine.connect() as conn:
        from sqlalchemy import text

        return float(conn.execute(text("SELECT AVG(LENGTH(event)) FROM log_events")).scalar_one())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--peers-python", default=str(HERE / ".peers" / "bin" / "python"))
    ap.add_argument("--seed", type=int, default=17)
    ns = ap.parse_args()
    if not Path(ns.peers_python).exists():
        raise SystemExit(f"no peers Python at {ns.peers_python}; see this file's docstring")
    rng = random.Random(ns.seed)
    with tempfile.TemporaryDirectory() as tmp:
        agt = subprocess.Popen(
            [ns.peers_python, str(WORKER), "--entries", str(ns.entries), "--workdir", tmp],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert agt.stdin is not None and agt.stdout is not None
        ready = json.loads(agt.stdout.readline())
        store, notes, verifier = build_warden(
            f"sqlite:///{Path(tmp) / 'warden.db'}", ns.entries, int(ready["bytes_per_entry"])
        )
        rates: dict[str, list[float]] = {"warden": [], "agt-file": [], "agt-memory": []}
        tree_only: list[float] = []
        try:
            for _ in range(ns.rounds):
                order = ["warden", "agt"]
                rng.shuffle(order)
                for case in order:
                    if case == "warden":
                        began = time.perf_counter()
                        report = check_log(
                            tlog_sql.iter_leaf_pages(store.engine),
                            notes,
                            verifier=verifier,
                            paged=True,
                        )
                        seconds = time.perf_counter() - began
                        assert report.leaves == ns.entries and report.checkpoints_checked == 1
                        rates["warden"].append(report.leaves / seconds)
                        tree_only.append(report.leaves / report.seconds)
                    else:
                        agt.stdin.write(json.dumps({"cmd": "verify"}) + "\n")
                        agt.stdin.flush()
                        got = json.loads(agt.stdout.readline())
                        assert got["ok"] == [True, True], got
                        rates["agt-file"].append(ready["entries"] / got["file_s"])
                        rates["agt-memory"].append(ready["memory_entries"] / got["memory_s"])
        finally:
            agt.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            agt.stdin.close()
            agt.wait(30)
            warden_bytes = mean_leaf_bytes(store)
            store.close()
    doc: dict[str, Any] = {
        "entries": ns.entries,
        "rounds": ns.rounds,
        "bytes_per_entry": {"warden": round(warden_bytes, 1), "agt-file": ready["bytes_per_entry"]},
        "entries_per_second": {
            case: {
                "median": round(statistics.median(v)),
                "p99": round(nearest_rank(v, 1)),  # the 99th percentile of time = 1st of rate
            }
            for case, v in rates.items()
        },
        "warden_read_hash_tree_only_median": round(statistics.median(tree_only)),
        "ratios": {
            f"warden ÷ {peer}": {
                "of_medians": round(
                    statistics.median(rates["warden"]) / statistics.median(rates[peer]), 2
                ),
                "paired_median": round(
                    statistics.median(
                        w / p for w, p in zip(rates["warden"], rates[peer], strict=True)
                    ),
                    2,
                ),
            }
            for peer in ("agt-file", "agt-memory")
        },
    }
    print(json.dumps(doc, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
