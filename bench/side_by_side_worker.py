"""One persistent measuring process of ``bench/side_by_side.py`` (not run by hand).

``--case`` picks what this process measures:

- ``warden``: Warden's full ACS decision (``warden_case.ScenarioWarden``), with the
  Warden checkout first on ``PYTHONPATH``; run by Warden's Python;
- ``agt-file``: Microsoft AGT ``PolicyEngine.evaluate`` plus ``AuditLog`` with its
  ``FileAuditSink`` (JSONL, SHA-256 chain, HMAC, no fsync), exactly as
  ``../shared/peers/bench_agt.py`` times it;
- ``agt-policy``: ``PolicyEngine.evaluate`` alone;
- ``cedar``: cedarpy ``is_authorized`` on pre-parsed handles plus the ask mapping, as
  ``bench_cedar.py`` times it.

The peer cases import ``bench_agt`` / ``bench_cedar`` from ``--peers-dir`` (their
policy translation and request shapes) and run in the peers' own venv.

Protocol: one JSON object per line. At start the worker prints ``{"ready": true,
"info": {...}, "probes": [...]}`` (``probes``: the scenario's probe requests with the
expected and obtained effect). Then for each ``{"cmd": "run", "n": N, "warmup": W}``
on stdin it makes ``W`` untimed calls, ``gc.collect()``, then ``N`` calls each timed
with ``perf_counter_ns`` (and, around that, the process's CPU time with
``process_time_ns``), and prints ``{"samples": [ns, ...], "cpu": [ns, ...]}``. ``{"cmd": "quit"}``
(or end of input) ends it. Anything else the process prints goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Call = Callable[[], Any]


class Case:
    """What a worker times: ``prepare(n)`` (untimed: builds the next ``n`` calls'
    inputs), ``call()`` (timed), ``check()`` (untimed: raises if an answer was wrong)."""

    info: dict[str, Any]
    probes: list[dict[str, Any]]

    def prepare(self, n: int) -> None:  # pragma: no cover - overridden
        pass

    def call(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass


class WardenCase(Case):
    def __init__(
        self, scenario: Any, workdir: Path, bundle: Path, sync: str, keep_answers: bool = False
    ) -> None:
        from warden_case import ScenarioWarden, check_probes

        import warden

        self.scenario = scenario
        self.warden = ScenarioWarden(workdir, bundle, sync)
        self.probes = check_probes(self.warden, scenario)
        self.info = {"warden": str(Path(warden.__file__).resolve().parent), "sync": sync}
        self._bodies: list[bytes] = []
        #: What ``check`` reads: each answer's decision (a ``str``, which the cyclic GC
        #: does not track), or the whole answer when it has none. ``keep_answers`` keeps
        #: every answer (8 tracked containers each) until the chunk ends, as this worker
        #: did until issue 16's ninth session: those survivors set off a generation-0
        #: collection in ~2 % of the timed calls, charged to Warden, while the AGT cases
        #: drop what they return (bench/RESULTS.md, "Issue 16, ninth session").
        self._keep = keep_answers
        self._answers: list[Any] = []
        self._next = 0

    def prepare(self, n: int) -> None:
        self._bodies = self.warden.bodies(self.scenario.REQUEST, n)
        self._answers = []
        self._next = 0

    def call(self) -> Any:
        body = self._bodies[self._next]
        self._next += 1
        answer = self.warden.handle(body)
        if self._keep:
            self._answers.append(answer)
            return
        result = answer.get("result")
        self._answers.append(result.get("decision") if isinstance(result, dict) else answer)

    def check(self) -> None:
        for answer in self._answers:
            if self._keep:
                result = answer.get("result")
                answer = result.get("decision") if isinstance(result, dict) else answer
            if answer != "ask":
                raise RuntimeError(f"the benchmarked request was not answered ask: {answer}")

    def close(self) -> None:
        self.warden.close()


class AgtCase(Case):
    def __init__(self, scenario: Any, workdir: Path, with_file_audit: bool) -> None:
        import bench_agt as agt

        engine = agt.PolicyEngine(conflict_strategy="priority_first_match")
        engine.load_yaml(agt.policy_yaml())
        ctx = agt.to_ctx(scenario.REQUEST)
        agent = agt.AGENT
        evaluate = engine.evaluate

        def decide(r: dict[str, Any]) -> tuple[str, str | None]:
            d = engine.evaluate(agent, agt.to_ctx(r))
            return agt.BACK_MAP[d.action], d.matched_rule

        self.probes = _probe_rows(scenario, decide)
        self.info = {
            "versions": {"agent-governance-toolkit-core": _version("agent-governance-toolkit-core")}
        }
        if not with_file_audit:
            self._call: Call = lambda: evaluate(agent, ctx)
            return
        workdir.mkdir(parents=True, exist_ok=True)
        log = agt.AuditLog(sink=agt.FileAuditSink(str(workdir / "audit.jsonl"), b"k" * 32))

        def with_file_audit() -> None:
            dd = evaluate(agent, ctx)
            log.log(
                event_type="policy_evaluation",
                agent_did=agent,
                action=ctx["action"]["type"],
                outcome=dd.action,
                policy_decision=dd.action,
                data={"rule": dd.matched_rule or "", "reason": dd.reason or ""},
            )

        self._call = with_file_audit

    def call(self) -> Any:
        return self._call()


class CedarCase(Case):
    def __init__(self, scenario: Any) -> None:
        import bench_cedar as bc

        pset = bc.PolicySet.from_str(bc.cedar_source())
        ents = bc.Entities.from_json_str("[]")
        req = bc.to_request(scenario.REQUEST)
        is_authorized, map_result = bc.is_authorized, bc.map_result
        self.probes = _probe_rows(
            scenario, lambda r: map_result(is_authorized(bc.to_request(r), pset, ents))
        )
        self.info = {"versions": {"cedarpy": _version("cedarpy")}}
        self._call: Call = lambda: map_result(is_authorized(req, pset, ents))

    def call(self) -> Any:
        return self._call()


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def _probe_rows(scenario: Any, decide: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    rows = []
    for probe in scenario.PROBES:
        expected, _rule = scenario.reference_decide(probe)
        got = decide(probe)[0]
        rows.append(
            {"tool": probe["tool"], "amount": probe["args"].get("amount_usd"),
             "env": probe["env"], "expected": expected, "got": got, "ok": got == expected}
        )  # fmt: skip
    return rows


def timed(case: Case, n: int, warmup: int) -> tuple[list[int], list[int]]:
    """``warmup`` untimed calls, a collection, then ``n`` calls timed one by one: wall
    time (``perf_counter_ns``, as the peers' harness) and this process's CPU time
    (``process_time_ns``, all its threads: what the call cost when the VM's other tenants
    preempt it). The CPU clock is read outside the wall clock's readings."""
    case.prepare(n + warmup)
    for _ in range(warmup):
        case.call()
    gc.collect()
    samples = [0] * n
    cpu = [0] * n
    pc = time.perf_counter_ns
    pt = time.process_time_ns
    call = case.call
    for i in range(n):
        c0 = pt()
        t0 = pc()
        call()
        t1 = pc()
        cpu[i] = pt() - c0
        samples[i] = t1 - t0
    case.check()
    return samples, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=["warden", "agt-file", "agt-policy", "cedar"])
    ap.add_argument("--peers-dir", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--bundle", type=Path)
    ap.add_argument("--sync", default="NORMAL")
    ap.add_argument("--keep-answers", action="store_true")
    ns = ap.parse_args()
    # The protocol owns stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.path.insert(0, str(ns.peers_dir))
    import warnings

    warnings.filterwarnings("ignore")
    import scenario

    case: Case
    if ns.case == "warden":
        case = WardenCase(scenario, ns.workdir, ns.bundle, ns.sync, ns.keep_answers)
    elif ns.case == "cedar":
        case = CedarCase(scenario)
    else:
        case = AgtCase(scenario, ns.workdir, with_file_audit=ns.case == "agt-file")
    info = {**case.info, "python": sys.version.split()[0], "executable": sys.executable}
    out.write(json.dumps({"ready": True, "info": info, "probes": case.probes}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") != "run":
            break
        samples, cpu = timed(case, int(cmd["n"]), int(cmd.get("warmup", 0)))
        out.write(json.dumps({"samples": samples, "cpu": cpu}) + "\n")
    case.close()


if __name__ == "__main__":
    main()
