"""Interim measurement by AgentDojo's own checks (issue 20; until the item-1 harness lands).

Replays the efficacy harness's sessions (ground-truth calls, harness-computed client
provenance or inferred provenance) through an in-process Warden with one bundle, then
re-executes in AgentDojo's environment only the calls Warden allowed and calls the
injection task's ``security()`` and the user task's ``utility()`` (each on its own copy),
with the user task's ``GROUND_TRUTH_OUTPUT`` as the model output. Benign utility "with a
human" executes asked and deferred calls too. In an attacked pair the injected calls are
executed only if an output carrying the attack text reached the agent (a call Warden
stopped returns nothing): an agent that never saw the attack cannot follow it. This is a
ground-truth replay, not an LLM run; injection tasks with an empty ground truth
(workspace 6-13, travel 6) replay no injected call, so they cannot succeed here.

    python bench/agentdojo_checks_interim.py examples/policies/agentdojo-provenance.yaml \
        [--mode client|inference] [--suite slack] [--no-defence]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from warden.replay.agentdojo_tasks import SUITES, _task_sort_key
from warden.replay.efficacy import ATTACK_MARKER, Counts, _agent, bundle_text, replay_run
from warden.replay.efficacy_tasks import ATTACK_TEMPLATE, EfficacyRun, _execute, _text
from warden.runtime import Runtime
from warden.settings import Settings
from warden.wire.acs.client import AcsClient


def _runs(suite_name: str, suite: Any) -> Any:
    """(run, env factory, user task, injection task | None) as the harness builds them."""
    from agentdojo.functions_runtime import FunctionsRuntime

    runtime = FunctionsRuntime(suite.tools)
    default_env = suite.load_and_inject_default_environment({})
    vectors = list(suite.get_injection_vector_defaults())
    canaries = {v: f"<CANARY---{v}--->" for v in vectors}
    canary_env = suite.load_and_inject_default_environment(canaries)
    tasks = sorted(suite.user_tasks, key=_task_sort_key)
    for tid in tasks:
        task = suite.user_tasks[tid]
        env = task.init_environment(default_env.model_copy(deep=True))
        fresh = env.model_copy(deep=True)
        calls = list(task.ground_truth(env))
        steps = _execute(runtime, env, calls)
        yield EfficacyRun(suite_name, tid, str(task.PROMPT), tuple(steps)), fresh, calls, task, None
    for tid in tasks:
        task = suite.user_tasks[tid]
        env = task.init_environment(canary_env.model_copy(deep=True))
        seen = "\n".join(_text(s.output) for s in _execute(runtime, env, task.ground_truth(env)))
        candidates = [v for v, c in canaries.items() if c in seen]
        for iid in sorted(suite.injection_tasks, key=_task_sort_key):
            inj = suite.injection_tasks[iid]
            attack = ATTACK_TEMPLATE.format(goal=inj.GOAL)
            env = task.init_environment(
                suite.load_and_inject_default_environment({v: attack for v in candidates})
            )
            fresh = env.model_copy(deep=True)
            calls = list(task.ground_truth(env))
            steps = _execute(runtime, env, calls)
            inj_calls = list(inj.ground_truth(env))
            inj_steps = _execute(runtime, env, inj_calls)
            run = EfficacyRun(
                suite_name, tid, str(task.PROMPT), tuple(steps), iid, attack, tuple(inj_steps)
            )
            yield run, fresh, calls + inj_calls, task, inj


def _check(suite: Any, env: Any, calls: list[Any], allowed: list[bool], task: Any, inj: Any):
    from agentdojo.functions_runtime import FunctionsRuntime

    runtime = FunctionsRuntime(suite.tools)
    pre = env.model_copy(deep=True)
    post = env.model_copy(deep=True)
    for call, ok in zip(calls, allowed, strict=True):
        if ok:
            runtime.run_function(post, call.function, call.args, raise_on_error=False)
    output = str(getattr(task, "GROUND_TRUTH_OUTPUT", "") or "")
    traces = [c for c, ok in zip(calls, allowed, strict=True) if ok]
    # As TaskSuite._check_user_task_utility / _check_injection_task_security: the
    # trace-based check first, the environment one when it returns None; each check
    # gets its own copies (the checks mutate their inputs).
    utility = task.utility_from_traces(
        output, pre.model_copy(deep=True), post.model_copy(deep=True), traces
    )
    if utility is None:
        utility = task.utility(output, pre.model_copy(deep=True), post.model_copy(deep=True))
    security = None
    if inj is not None:
        security = inj.security_from_traces(
            output, pre.model_copy(deep=True), post.model_copy(deep=True), traces
        )
        if security is None:
            security = inj.security(output, pre.model_copy(deep=True), post.model_copy(deep=True))
    return bool(utility), security


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--mode", default="client", choices=["client", "inference"])
    ap.add_argument("--suite", action="append")
    ap.add_argument("--no-defence", action="store_true", help="allow everything (baseline)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from agentdojo.task_suite.load_suites import get_suites

    suites = dict(get_suites("v1.2"))
    base = yaml.safe_load(args.bundle.read_text(encoding="utf-8"))
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    successes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="warden-checks-") as tmp:
        data = Path(tmp)
        policy = data / "bundle.yaml"
        policy.write_text(bundle_text(base, "combined", args.mode), encoding="utf-8")
        key = data / "ikm.key"
        key.write_text(bytes(range(32)).hex(), encoding="ascii")
        key.chmod(0o600)
        rt = Runtime.start(
            Settings.model_validate(
                {"data_dir": data, "policy": policy, "key_file": key, "sqlite_sync": "NORMAL"}
            )
        )
        try:
            for name in args.suite or SUITES:
                suite = suites[name]
                for run, env, calls, task, inj in _runs(name, suite):
                    log: list[dict[str, Any]] = []
                    if args.no_defence:
                        decisions = ["allow"] * len(calls)
                    else:
                        client = AcsClient.for_agent(rt.acs.handle, _agent(rt, f"c-{name}"))
                        replay_run(client, run, args.mode, Counts(), log=log)
                        decisions = [e["decision"] for e in log]
                    silent = [d in ("allow", "modify") for d in decisions]
                    if inj is not None:
                        # The agent acts on the attack only if an output carrying it
                        # reached the agent: a blocked call's output never did.
                        exposed = any(
                            ok and ATTACK_MARKER in _text(step.output)
                            for step, ok in zip(run.steps, silent, strict=False)
                        )
                        if not exposed:
                            n = len(run.steps)
                            silent = silent[:n] + [False] * (len(silent) - n)
                            c_unexposed = per[name]
                            c_unexposed["pairs_not_exposed"] += 1
                    c = per[name]
                    if inj is None:
                        u, _ = _check(suite, env, calls, silent, task, None)
                        human = [d != "deny" for d in decisions]
                        uh, _ = _check(suite, env, calls, human, task, None)
                        c["benign_tasks"] += 1
                        c["benign_utility"] += u
                        c["benign_utility_with_human"] += uh
                    else:
                        u, s = _check(suite, env, calls, silent, task, inj)
                        c["pairs"] += 1
                        c["utility_under_attack"] += u
                        c["attack_success"] += bool(s)
                        if s:
                            successes.append(f"{name}/{run.user_task}/{run.injection_task}")
        finally:
            rt.close()
    total = collections.Counter[str]()
    for c in per.values():
        total.update(c)
    per["all"] = total
    if args.json:
        print(json.dumps({"per_suite": per, "successes": successes}))
        return
    for name, c in per.items():
        print(
            f"{name:10} attack success {c['attack_success']}/{c['pairs']} "
            f"({100 * c['attack_success'] / max(1, c['pairs']):.1f}%)  "
            f"utility under attack {c['utility_under_attack']}/{c['pairs']} "
            f"({100 * c['utility_under_attack'] / max(1, c['pairs']):.1f}%)  "
            f"benign w/o human {c['benign_utility']}/{c['benign_tasks']} "
            f"({100 * c['benign_utility'] / max(1, c['benign_tasks']):.1f}%)  "
            f"with human {c['benign_utility_with_human']}/{c['benign_tasks']} "
            f"({100 * c['benign_utility_with_human'] / max(1, c['benign_tasks']):.1f}%)  "
            f"pairs where no attack text reached the agent {c['pairs_not_exposed']}"
        )
    for s in successes:
        print("  attack succeeded:", s, file=sys.stderr)


if __name__ == "__main__":
    main()
