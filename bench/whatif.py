"""`warden whatif` replay speed (issue 19): recorded decisions replayed per second, one
process, recorded bundle and candidate both evaluated for every decision.

Records the AgentDojo v1.2 ground truth once through an in-process Warden
(examples/policies/agentdojo.yaml with the AgentDojo budgets: 1,168 ACS decisions), then
copies those sessions into new ones until the log holds ``--decisions`` decisions
(entry rows with fresh session ids and leaf indexes). With ``--distinct`` every copy's
string arguments get the copy's number appended, so no two copies of a tool call read
the same facts (the memo cannot help them: the worst case). It then times, several
times each, in the same process:

* ``read``: the baseline, reading every entry leaf and parsing its JSON (entry and
  params, orjson as the replay does), what any replay must do;
* ``replay``: `what_if` with the candidate (send_money taken out of the transfer ask
  rules) and the recorded bundle, memo on (as the CLI runs);
* ``replay, no memo``: every step evaluated by both bundles.

Rates are decisions per wall-clock second of the whole call and, because this 2-core
machine is shared, per CPU second of the process (``, CPU``).

    python bench/whatif.py --decisions 100000 [--distinct] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "whatif"))


def record(data: Path) -> None:
    from conftest import AGENTDOJO_POLICY, write_key
    from dojo import AGENTDOJO_BUDGETS, record_agentdojo

    from warden.runtime import Runtime
    from warden.settings import Settings

    key = write_key(data / "ikm.key")
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=AGENTDOJO_POLICY,
            key_file=key,
            budgets=AGENTDOJO_BUDGETS,
            sqlite_sync="NORMAL",
            policy_poll_interval_s=0,
        )
    )
    try:
        record_agentdojo(rt)
    finally:
        rt.close()


def _vary(value: Any, tag: str) -> Any:
    if isinstance(value, str):
        return value + tag
    if isinstance(value, list):
        return [_vary(v, tag) for v in value]
    return value


def multiply(db: Path, decisions: int, *, distinct: bool) -> int:
    """Copy the ACS sessions until about ``decisions`` ACS entries exist; return them."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        sessions = con.execute(
            "SELECT session_id, agent_id, key_id, created_at, negotiated FROM sessions "
            "WHERE session_id IN (SELECT session_id FROM entries WHERE request IS NOT NULL)"
        ).fetchall()
        rows = con.execute(
            "SELECT session_id, seq, entry_hash, step_id, step_type, entry, created_at, request "
            "FROM entries WHERE request IS NOT NULL ORDER BY log_index"
        ).fetchall()
        base = len(rows)
        next_index = con.execute("SELECT MAX(log_index) + 1 FROM entries").fetchone()[0]
        copy = 0
        total = base
        while total < decisions:
            copy += 1
            tag = f"-c{copy}"
            con.executemany(
                "INSERT INTO sessions (session_id, agent_id, key_id, created_at, negotiated, "
                "closed, head_seq) VALUES (?, ?, ?, ?, ?, 1, 0)",
                [(s[0] + tag, s[1], s[2], s[3], s[4]) for s in sessions],
            )
            out = []
            for r in rows:
                request = r[7]
                if distinct:
                    params = json.loads(request)
                    args = (params.get("payload") or {}).get("arguments")
                    if isinstance(args, dict):
                        for arg in args.values():
                            if isinstance(arg, dict) and "value" in arg:
                                arg["value"] = _vary(arg["value"], tag)
                    request = json.dumps(params)
                out.append(
                    (r[0] + tag, r[1], r[2], r[3] + tag, r[4], r[5], r[6], request, next_index)
                )
                next_index += 1
            con.executemany(
                "INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, entry, "
                "created_at, request, log_index) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                out,
            )
            total += base
        con.commit()
        return total
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--distinct", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args()

    from dojo import send_money_candidate

    from warden.policy.bundle import load_bundle
    from warden.store import open_store
    from warden.whatif import what_if
    from warden.whatif.reader import StoreLogReader

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        began = time.perf_counter()
        record(data)
        total = multiply(data / "warden.db", args.decisions, distinct=args.distinct)
        print(f"history: {total} ACS decisions ({time.perf_counter() - began:.1f} s to build)")
        store = open_store(f"sqlite:///{data / 'warden.db'}", migrate=False)
        reader = StoreLogReader(store.engine, "bench")
        candidate = load_bundle(send_money_candidate(Path(tmp)))
        results: dict[str, list[float]] = {
            name: []
            for name in (
                "read",
                "read, CPU",
                "replay",
                "replay, CPU",
                "replay, no memo",
                "replay, no memo, CPU",
            )
        }
        evaluations: dict[str, int] = {}
        for _ in range(args.repeats):
            t, cpu = time.perf_counter(), time.process_time()
            n = 0
            for e in reader.entries():
                orjson.loads(e.entry) if isinstance(e.entry, str) else e.entry
                if e.request is not None:
                    orjson.loads(e.request)
                    n += 1
            results["read"].append(n / (time.perf_counter() - t))
            results["read, CPU"].append(n / (time.process_time() - cpu))
            for name, memo in (("replay", True), ("replay, no memo", False)):
                t, cpu = time.perf_counter(), time.process_time()
                doc = what_if(reader, candidate, window=None, memo=memo)
                wall, used = time.perf_counter() - t, time.process_time() - cpu
                # --distinct rewrote the recorded arguments, so their recorded verdicts no
                # longer follow from them: faithfulness holds only for the true history.
                assert doc["decisions"] == total, doc
                assert args.distinct or doc["faithfulness"]["faithful"], doc["faithfulness"]
                # The whole call: stored bundles parsed, the log read, the report built.
                results[name].append(total / wall)
                results[f"{name}, CPU"].append(total / used)
                evaluations[name] = doc["evaluations"]
        store.close()
    out = {
        "decisions": total,
        "distinct": args.distinct,
        "repeats": args.repeats,
        **{
            name: {
                "median_per_s": round(statistics.median(v)),
                "min_per_s": round(min(v)),
                "max_per_s": round(max(v)),
            }
            for name, v in results.items()
        },
        "evaluations": evaluations,
    }
    for name in ("replay", "replay, no memo"):
        for suffix in ("", ", CPU"):
            base = statistics.median(results["read" + suffix])
            ratio = statistics.median(results[name + suffix]) / base
            out[name + suffix]["ratio_to_read"] = round(ratio, 3)
    print(json.dumps(out, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
