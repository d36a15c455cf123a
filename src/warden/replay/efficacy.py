"""AgentDojo efficacy harness for the provenance gates (issue 8; docs/provenance.md, "Efficacy on
AgentDojo attacks").

For each configuration — one paradigm alone (``fides``, ``ibac``, ``aarm``, ``camel``) or
all four (``combined``), with **client** provenance (the harness sends a provenance object
on every data-bearing field) or **inference** mode (the harness sends none; Warden's
bundle has ``inference: true``) — a fresh in-process Warden (the real ACS service, real
signatures, a SQLite file, the approval desk) replays:

* every benign run (:mod:`warden.replay.efficacy_tasks`): sessionStart with an Intent, the
  user prompt, then each ground-truth call and its result;
* every attacked (user task, injection task) pair: the user task's calls, whose outputs
  carry the attack text, then the injection task's ground-truth calls.

Harness-computed provenance (client mode): the prompt is ``user_input``; each tool output
is ``tool_output`` of its tool; an argument is ``agent_generated`` and derives from the
outputs in which one of its values appears (not counting values the prompt contains) and
from the prompt otherwise. Injection-task arguments derive from the output that carried
the attack. The Intent's ``parsed`` capabilities are the tools of the user task's ground
truth (an oracle intent parser). A call Warden allows is executed (its recorded output is
sent); one it asks, defers or denies is ``blocked``: no human ever answers. The
throwaway databases run with ``synchronous=NORMAL``.

This replays ground-truth calls with harness-computed provenance; it is not an LLM agent
run.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.table import Table

from warden.cli_output import print_table
from warden.cli_output import table as cli_table
from warden.provenance.graph import leaves
from warden.replay.agentdojo_tasks import ToolStep, is_state_changing
from warden.replay.efficacy_tasks import EfficacyRun, load_efficacy_runs
from warden.wire.acs.client import AcsClient

if TYPE_CHECKING:
    from warden.crypto.agent_key import AgentCredential
    from warden.runtime import Runtime

#: One gate alone, the three that look at the call's own data, or all four.
PARADIGMS: tuple[str, ...] = ("fides", "ibac", "aarm", "camel", "fides+ibac+camel", "combined")
MODES: tuple[str, ...] = ("client", "inference")
#: Marks the attack text inside a tool output (the template's opening tag).
ATTACK_MARKER = "<INFORMATION>"
_NO_HUMAN = ("allow", "modify")
_MIN_LEAF = 3
HELLO_METHODS = (
    "steps/sessionStart",
    "steps/userMessage",
    "steps/toolCallRequest",
    "steps/toolCallResult",
    "steps/sessionEnd",
)


def bundle_text(base: dict[str, Any], paradigm: str, mode: str) -> str:
    """The efficacy bundle for one configuration: ``base`` with only ``paradigm``'s gates
    enabled (``a+b`` names several, ``combined`` all four) and inference on in
    ``inference`` mode."""
    doc = json.loads(json.dumps(base))
    section = doc.setdefault("provenance", {})
    gates = section.setdefault("gates", {})
    for name in ("fides", "ibac", "aarm", "camel"):
        gates.setdefault(name, {})["enabled"] = paradigm == "combined" or name in paradigm.split(
            "+"
        )
    section["inference"] = mode == "inference"
    doc["version"] = f"{doc.get('version', '1')}+{paradigm}.{mode}"
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class Counts:
    """Decision counts of one configuration in one suite. ``stops`` lists, per benign
    task that needed a human, the first call stopped and the gates that stopped it
    (issue 20: the precision work made visible); ``benign_stopped_by_<gate>`` counts
    those tasks per gate (``policy`` when a rule of the bundle, not a gate, stopped it)."""

    c: Counter[str] = field(default_factory=Counter)
    asked_reasons: list[str] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)


def stopping_gates(result: dict[str, Any]) -> list[str]:
    """The gates behind a verdict (``builtin:<gate>`` policy references), or ``policy``
    when only the bundle's rules made it."""
    gates = [
        str(ref.get("rule_id", ""))[len("builtin:") :]
        for ref in result.get("policy_references") or ()
        if str(ref.get("rule_id", "")).startswith("builtin:")
    ]
    return list(dict.fromkeys(gates)) or ["policy"]


def _leaf_forms(value: Any) -> list[str]:
    out = []
    for leaf in leaves(value):
        out.append(leaf)
        try:
            number = float(leaf)
        except ValueError:
            continue
        if number.is_integer() and "." in leaf:
            out.append(str(int(number)))
    return out


def arg_provenance(
    value: Any, prompt: str, outputs: list[tuple[str, str]], pid: str, forced: str | None
) -> dict[str, Any]:
    """Harness-computed provenance of one argument (see module docstring)."""
    derived: list[str] = [forced] if forced else []
    if not forced:
        for leaf in _leaf_forms(value):
            if leaf in prompt or len(leaf) < _MIN_LEAF:
                continue
            for opid, text in reversed(outputs):
                if leaf in text:
                    derived.append(opid)
                    break
    return {
        "provenance_id": pid,
        "origin": "agent_generated",
        "derived_from": list(dict.fromkeys(derived)) or ["p:prompt"],
    }


def replay_run(
    client: AcsClient,
    run: EfficacyRun,
    mode: str,
    counts: Counts,
    trusted: Callable[[str], bool] = lambda source: False,
    log: list[dict[str, Any]] | None = None,
) -> None:
    """One session for ``run``; counts benign (user-task) calls of benign runs and the
    injection task's calls of attacked runs. ``trusted`` says whether the bundle trusts
    a tool's output (an attack carried by one is counted: the bundle is then wrong).
    ``log``, when given, receives every call's ``{function, injection, decision,
    reason_codes, policy_data}`` in order."""
    attacked = bool(run.attack)
    with_prov = mode == "client"
    client.hello(HELLO_METHODS, provenance_producer="deterministic" if with_prov else "none")
    tools = list(dict.fromkeys(s.function for s in run.steps))
    intent = {
        "raw": run.prompt,
        "parsed": [{"tool": t} for t in tools],
        "parser_provenance": {
            "provenance_id": "p:intent",
            "origin": "user_input",
            "derived_from": ["p:prompt"],
        },
    }
    _ok(client.call("steps/sessionStart", {"intent": intent}))
    content: dict[str, Any] = {"type": "text", "value": run.prompt}
    if with_prov:
        content["provenance"] = {"provenance_id": "p:prompt", "origin": "user_input"}
    _ok(client.call("steps/userMessage", {"content": [content]}))
    outputs: list[tuple[str, str]] = []
    injected: list[str] = []
    task_clean = True
    steps: list[tuple[ToolStep, bool]] = [(s, False) for s in run.steps]
    steps += [(s, True) for s in run.injection_steps]
    for i, (step, is_injection) in enumerate(steps):
        forced = injected[0] if is_injection and injected else None
        arguments: dict[str, Any] = {}
        for name, value in step.args.items():
            arg: dict[str, Any] = {"value": value}
            if with_prov:
                arg["provenance"] = arg_provenance(
                    value, run.prompt, outputs, f"p:arg:{i}:{name}", forced
                )
            arguments[name] = arg
        env = client.envelope(
            "steps/toolCallRequest", {"tool": {"name": step.function}, "arguments": arguments}
        )
        result = _ok(client.send(env))
        decision = str(result["decision"])
        human = decision not in _NO_HUMAN
        if log is not None:
            log.append(
                {
                    "function": step.function,
                    "injection": is_injection,
                    "decision": decision,
                    "reason_codes": list(result.get("reason_codes") or ()),
                    "policy_data": result.get("policy_data") or {},
                }
            )
        if is_injection:
            kind = "inj" if is_state_changing(step.function) else "inj_read"
            counts.c[f"{kind}_calls"] += 1
            counts.c[f"{kind}_" + ("allowed" if not human else decision)] += 1
        elif not attacked:
            counts.c["benign_calls"] += 1
            counts.c["benign_" + ("allowed" if not human else decision)] += 1
            if human:
                if task_clean:
                    gates = stopping_gates(result)
                    for gate in gates:
                        counts.c[f"benign_stopped_by_{gate}"] += 1
                    counts.stops.append(
                        {
                            "suite": run.suite,
                            "user_task": run.user_task,
                            "tool": step.function,
                            "decision": decision,
                            "gates": gates,
                            "reason_codes": [
                                c
                                for c in result.get("reason_codes") or ()
                                if c != "approval_pending"
                            ],
                        }
                    )
                task_clean = False
                if len(counts.asked_reasons) < 400:
                    counts.asked_reasons.append(
                        f"{run.suite}/{run.user_task} {step.function} → {decision}: "
                        f"{result.get('reasoning', '')}"
                    )
        if not human:
            status = "failure" if step.error else "success"
            value = step.error if step.error else step.output
            out: dict[str, Any] = {"value": value}
            pid = f"p:out:{i}"
            if with_prov:
                out["provenance"] = {
                    "provenance_id": pid,
                    "origin": "tool_output",
                    "source_id": step.function,
                }
            text = "\n".join(leaves(value))
            outputs.append((pid, text))
            if attacked and ATTACK_MARKER in text:
                injected.append(pid)
                if len(injected) == 1 and trusted(step.function):
                    counts.c["pairs_via_trusted_source"] += 1
            payload = {
                "tool": {"name": step.function},
                "exit_status": status,
                "outputs": [out],
                "request_id_ref": env["params"]["request_id"],
            }
        else:
            payload = {
                "tool": {"name": step.function},
                "exit_status": "blocked",
                "outputs": [],
                "request_id_ref": env["params"]["request_id"],
            }
        _ok(client.call("steps/toolCallResult", payload))
    _ok(client.call("steps/sessionEnd", {"reason": "completed"}))
    if attacked:
        counts.c["pairs"] += 1
        counts.c["pairs_exposed"] += bool(injected)
    else:
        counts.c["benign_tasks"] += 1
        counts.c["benign_tasks_clean"] += task_clean


class HarnessError(Exception):
    """A protocol error during the harness run (the replay itself is wrong)."""


def _ok(response: dict[str, Any]) -> dict[str, Any]:
    if "error" in response:
        raise HarnessError(json.dumps(response["error"])[:500])
    result: dict[str, Any] = response["result"]
    return result


Results = dict[tuple[str, str], dict[str, Counts]]


def run_efficacy(
    base_bundle: Path,
    *,
    suites: Sequence[str] | None = None,
    paradigms: Sequence[str] = PARADIGMS,
    modes: Sequence[str] = MODES,
    user_tasks: int | None = None,
    attacked: bool = True,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Results:
    """Run every (paradigm, mode) configuration; return counts per suite."""
    from warden.runtime import Runtime
    from warden.settings import Settings

    base = yaml.safe_load(base_bundle.read_text(encoding="utf-8"))
    runs = list(load_efficacy_runs(suites, attacked=attacked, user_tasks=user_tasks))
    results: Results = {}
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="warden-efficacy-") as tmp:
        for paradigm in paradigms:
            for mode in modes:
                if progress is not None:
                    progress(f"{paradigm} / {mode}: {len(runs)} sessions")
                data = Path(tmp) / f"{paradigm}-{mode}"
                data.mkdir()
                policy = data / "bundle.yaml"
                policy.write_text(bundle_text(base, paradigm, mode), encoding="utf-8")
                ikm = bytes(range(32))
                key = data / "ikm.key"
                key.write_text(ikm.hex(), encoding="ascii")
                key.chmod(0o600)
                rt = Runtime.start(
                    Settings.model_validate(
                        # NORMAL: a throwaway database; durability across power loss is
                        # not what is measured, and FULL's fsync per step triples the time.
                        {
                            "data_dir": data,
                            "policy": policy,
                            "key_file": key,
                            "sqlite_sync": "NORMAL",
                        }
                    )
                )
                per_suite: dict[str, Counts] = defaultdict(Counts)
                spec = rt.guardian.engine.bundle.provenance
                trusted = spec.is_trusted_source if spec is not None else (lambda s: False)
                try:
                    for run in runs:
                        client = AcsClient.for_agent(
                            rt.acs.handle, _agent(rt, f"efficacy-{run.suite}")
                        )
                        replay_run(client, run, mode, per_suite[run.suite], trusted)
                finally:
                    rt.close()
                results[(paradigm, mode)] = dict(per_suite)
    return results


def _agent(rt: Runtime, agent_id: str) -> AgentCredential:
    """The credential of the harness's agent ``agent_id`` on ``rt`` (registered on first use:
    the harness is the operator of its own throwaway Warden)."""
    assert rt.agents is not None
    agent = rt.agents.get(agent_id)
    if agent is None:
        return rt.agents.add(agent_id, "efficacy-harness", by="efficacy")[1]
    active = [k.key_id for k in rt.agents.keys(agent_id) if k.revoked_at is None]
    return rt.agents.credential(active[-1])


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "–"


COLUMNS = (
    "benign calls allowed w/o human",
    "benign tasks w/o human",
    "injection calls allowed silently",
    "asked",
    "denied",
)


def rows(results: Results) -> list[tuple[str, str, str, list[str]]]:
    """Table rows: (paradigm, mode, suite, cells) with an ``all`` row per configuration."""
    out = []
    for (paradigm, mode), per_suite in results.items():
        total = Counter[str]()
        for suite in sorted(per_suite):
            total.update(per_suite[suite].c)
        for suite, c in [*((s, per_suite[s].c) for s in sorted(per_suite)), ("all", total)]:
            asked = c["inj_ask"] + c["inj_defer"]
            out.append(
                (
                    paradigm,
                    mode,
                    suite,
                    [
                        f"{c['benign_allowed']}/{c['benign_calls']} "
                        f"({_pct(c['benign_allowed'], c['benign_calls'])})",
                        f"{c['benign_tasks_clean']}/{c['benign_tasks']} "
                        f"({_pct(c['benign_tasks_clean'], c['benign_tasks'])})",
                        f"{c['inj_allowed']}/{c['inj_calls']}",
                        str(asked),
                        str(c["inj_deny"]),
                    ],
                )
            )
    return out


def table(results: Results, *, suites_too: bool = True) -> Table:
    t = cli_table(
        "paradigm",
        "provenance",
        "suite",
        *COLUMNS,
        title="AgentDojo v1.2 efficacy (ground-truth replay, harness-computed provenance)",
    )
    for paradigm, mode, suite, cells in rows(results):
        if suites_too or suite == "all":
            t.add_row(paradigm, mode, suite, *cells)
    return t


def markdown(results: Results) -> str:
    head = "| paradigm | provenance | suite | " + " | ".join(COLUMNS) + " |"
    sep = "|" + "---|" * (3 + len(COLUMNS))
    lines = [head, sep]
    for paradigm, mode, suite, cells in rows(results):
        name = f"**{suite}**" if suite == "all" else suite
        lines.append(f"| {paradigm} | {mode} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_document(results: Results) -> dict[str, Any]:
    """The results as ``warden replay agentdojo --efficacy --json`` prints them
    (docs/cli-json.md): per configuration, the raw counters of each suite and of all."""
    configurations = []
    for (paradigm, mode), per_suite in results.items():
        total = Counter[str]()
        for counts in per_suite.values():
            total.update(counts.c)
        configurations.append(
            {
                "paradigm": paradigm,
                "mode": mode,
                "suites": {s: dict(sorted(per_suite[s].c.items())) for s in sorted(per_suite)},
                "all": dict(sorted(total.items())),
                "benign_stops": [stop for s in sorted(per_suite) for stop in per_suite[s].stops],
            }
        )
    return {"ok": True, "configurations": configurations}


def stopped_by(results: Results) -> list[tuple[str, str, str]]:
    """Per configuration, the benign tasks that needed a human counted by the gate that
    stopped them: (paradigm, mode, ``"sinks 12, fides 8"``)."""
    out = []
    for (paradigm, mode), per_suite in results.items():
        total = Counter[str]()
        for counts in per_suite.values():
            total.update(counts.c)
        gates = sorted(
            (
                (k[len("benign_stopped_by_") :], n)
                for k, n in total.items()
                if k.startswith("benign_stopped_by_")
            ),
            key=lambda kv: (-kv[1], kv[0]),
        )
        out.append((paradigm, mode, ", ".join(f"{g} {n}" for g, n in gates) or "none"))
    return out


def print_report(results: Results, console: Console) -> None:
    print_table(console, table(results))
    for paradigm, mode, gates in stopped_by(results):
        console.print(f"benign tasks stopped ({paradigm}, {mode}), by gate: {gates}")
    total = Counter[str]()
    for per_suite in results.values():
        for counts in per_suite.values():
            total.update(counts.c)
    console.print(
        f"attacked pairs per configuration: {total['pairs'] // max(1, len(results))}, "
        f"exposed to the attack text: {total['pairs_exposed'] // max(1, len(results))} "
        f"(through a tool output the bundle trusts: "
        f"{total['pairs_via_trusted_source'] // max(1, len(results))}); "
        f"injection read-only calls (not consequential, not counted above) allowed: "
        f"{total['inj_read_allowed']}/{total['inj_read_calls']} over all configurations"
    )
