"""AgentDojo efficacy by AgentDojo's own checks, whole set (issue 20 items 1 and 5).

**Replays AgentDojo v1.2 ground-truth calls through Warden; not an LLM agent run.** Runs
:func:`warden.replay.dojo_efficacy.measure` on all four suites (97 user tasks benign, with
and without a human approving asks; 929 attacked pairs, travel ``injection_task_6``
left out as text-only) for every chosen (paradigm, provenance mode), then AgentDojo's own
no-defence baseline (:func:`warden.replay.dojo_suite.agentdojo_baseline`:
``TaskSuite.run_task_with_pipeline`` with an obedient ground-truth pipeline) and compares
it pair by pair with the harness's ``none`` configuration (no provenance gates, a bundle
whose rules allow everything). Prints the table, the attacks that still succeed per
configuration, the comparison, and wall-clock and CPU time.

    python bench/agentdojo_efficacy.py --markdown bench/out/agentdojo_efficacy.md \\
        --json bench/out/agentdojo_efficacy.json

The CI test (tests/replay/test_dojo_efficacy.py) runs a fixed subset; this runs it all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console

from warden.replay.dojo_efficacy import (
    DEFAULT_PARADIGMS,
    MODES,
    NOTE,
    markdown,
    measure,
    print_report,
    results_document,
)
from warden.replay.dojo_suite import agentdojo_baseline

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bundle", type=Path, default=ROOT / "examples" / "policies" / "agentdojo-provenance.yaml"
    )
    ap.add_argument("--suite", action="append", help="default: all four")
    ap.add_argument("--paradigm", action="append", help=f"default: {' '.join(DEFAULT_PARADIGMS)}")
    ap.add_argument("--mode", action="append", help="default: client inference")
    ap.add_argument("--user-tasks", type=int, default=None, help="first N user tasks per suite")
    ap.add_argument("--no-baseline", action="store_true", help="skip AgentDojo's own baseline")
    ap.add_argument("--markdown", type=Path, help="write the table here")
    ap.add_argument("--json", type=Path, help="write the --json document and timings here")
    args = ap.parse_args(argv)
    console = Console(width=220, stderr=False)
    paradigms = args.paradigm or list(DEFAULT_PARADIGMS)
    modes = args.mode or list(MODES)

    wall, cpu = time.perf_counter(), time.process_time()
    m = measure(
        args.bundle,
        suites=args.suite,
        paradigms=paradigms,
        modes=modes,
        user_tasks=args.user_tasks,
        progress=lambda text: print(text, file=sys.stderr, flush=True),
    )
    timing = {
        "harness_wall_s": round(time.perf_counter() - wall, 1),
        "harness_cpu_s": round(time.process_time() - cpu, 1),
        "configurations": len(paradigms) * len(modes),
    }
    print_report(m, console)

    comparison: dict[str, object] = {}
    if not args.no_baseline and "none" in paradigms:
        wall, cpu = time.perf_counter(), time.process_time()
        base = agentdojo_baseline(args.suite, user_tasks=args.user_tasks)
        timing["baseline_wall_s"] = round(time.perf_counter() - wall, 1)
        timing["baseline_cpu_s"] = round(time.process_time() - cpu, 1)
        theirs = {
            (b.suite, b.user_task, b.injection_task): (b.utility, b.attack_success) for b in base
        }
        for mode in modes:
            ours = m.pairs[("none", mode)]
            differ = sorted(k for k in theirs if ours.get(k) != theirs[k])
            comparison[mode] = {
                "pairs": len(theirs),
                "attack_success": sum(s for _, s in theirs.values()),
                "utility_under_attack": sum(u for u, _ in theirs.values()),
                "harness_attack_success": sum(s for _, s in ours.values()),
                "harness_utility_under_attack": sum(u for u, _ in ours.values()),
                "pairs_that_differ": [list(k) for k in differ],
            }
            console.print(
                f"AgentDojo's own no-defence baseline vs the harness's `none` ({mode}): "
                f"attack success {comparison[mode]['attack_success']}/{len(theirs)} vs "
                f"{comparison[mode]['harness_attack_success']}, utility under attack "
                f"{comparison[mode]['utility_under_attack']} vs "
                f"{comparison[mode]['harness_utility_under_attack']}; "
                f"pairs that differ: {len(differ)}"
            )
    console.print(f"timing: {timing}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(NOTE + "\n\n" + markdown(m) + "\n", encoding="utf-8")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = results_document(m) | {"timing": timing, "baseline_comparison": comparison}
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    bad = any(c["pairs_that_differ"] for c in comparison.values())  # type: ignore[index]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
