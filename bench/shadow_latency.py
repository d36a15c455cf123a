"""Shadow mode's cost on the response path (issue 19): ACS decision latency with and
without ``shadow_policy``, in the same run.

Two in-process runtimes on their own SQLite files (``sqlite_sync`` NORMAL), the same
bundle (examples/policies/agentdojo.yaml); the second also evaluates a shadow candidate
(send_money taken out of the transfer ask rules, so transfers to new payees diverge and
write ``policy.shadow_divergence`` events). Requests alternate between the two, one
AgentDojo banking call each (reads, known and new payees), and only ``AcsService.handle``
(parse, verify, decide, commit, sign) is timed. The shadow worker runs on its own thread
in the same process, as in ``warden serve``: what it costs the response path is whatever
it takes from the decision thread (the GIL, the database).

    python bench/shadow_latency.py --requests 4000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "whatif"))
sys.path.insert(0, str(ROOT / "bench"))

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_balance", {}),
    (
        "send_money",
        {"recipient": "XX00NEWPAYEE", "amount": 10, "subject": "x", "date": "2026-12-01"},
    ),
    ("get_most_recent_transactions", {"n": 10}),
    (
        "send_money",
        {"recipient": "GB29NWBK60161331926819", "amount": 5, "subject": "x", "date": "2026-12-01"},
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=4000, help="per runtime")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from conftest import AGENTDOJO_POLICY, write_key
    from dojo import AGENTDOJO_BUDGETS, send_money_candidate
    from latency_stats import summary

    from warden.runtime import Runtime
    from warden.settings import Settings
    from warden.wire.acs.client import AcsClient

    with tempfile.TemporaryDirectory() as tmp:
        runtimes: dict[str, Runtime] = {}
        for name, shadow in (("without", None), ("with shadow", send_money_candidate(Path(tmp)))):
            data = Path(tmp) / name.replace(" ", "-")
            runtimes[name] = Runtime.start(
                Settings(
                    data_dir=data,
                    policy=AGENTDOJO_POLICY,
                    key_file=write_key(data / "ikm.key"),
                    sqlite_sync="NORMAL",
                    budgets=AGENTDOJO_BUDGETS,
                    shadow_policy=shadow,
                    policy_poll_interval_s=0,
                )
            )
        try:
            samples: dict[str, list[float]] = {name: [] for name in runtimes}
            clients: dict[str, AcsClient] = {}
            for name, rt in runtimes.items():
                assert rt.agents is not None
                # The bundle charges the demo agent's transfers to its budget.
                _, cred = rt.agents.add("demo-agent", "demo-owner")

                def timed(body: bytes, rt: Runtime = rt, name: str = name) -> dict[str, Any]:
                    t = time.perf_counter()
                    out = rt.acs.handle(body)
                    samples[name].append(time.perf_counter() - t)
                    return out

                clients[name] = AcsClient.for_agent(timed, cred)
                clients[name].hello()
            for name in samples:
                samples[name].clear()  # the handshakes are not decisions
            for i in range(args.requests):
                tool, call_args = CALLS[i % len(CALLS)]
                for name in ("without", "with shadow") if i % 2 else ("with shadow", "without"):
                    clients[name].call(
                        "steps/toolCallRequest",
                        {
                            "tool": {"name": tool},
                            "arguments": {k: {"value": v} for k, v in call_args.items()},
                        },
                    )
            shadow = runtimes["with shadow"].shadow
            assert shadow is not None
            shadow.flush()
            out: dict[str, Any] = {name: summary(v) for name, v in samples.items()}
            out["ratio_median"] = round(
                out["with shadow"]["median_ms"] / out["without"]["median_ms"], 3
            )
            out["ratio_p99"] = round(out["with shadow"]["p99_ms"] / out["without"]["p99_ms"], 3)
            out["shadow"] = {
                "evaluated": sum(shadow.evaluated.values()),
                "diverged": sum(shadow.diverged.values()),
                "dropped": shadow.dropped,
            }
        finally:
            for rt in runtimes.values():
                rt.close()
    print(json.dumps(out, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
