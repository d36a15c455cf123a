"""AgentDojo efficacy measured with AgentDojo's own checks (issue 20, item 1).

**This replays AgentDojo v1.2 ground-truth calls through Warden; it is not an LLM agent
run.** For each configuration — a paradigm (``none``: no provenance gates; ``bundle``:
the gates as the bundle file sets them; one gate alone; ``fides+ibac+camel``;
``combined``: all four) with client or inferred provenance — one in-process Warden (the
real ACS service, signatures, a SQLite file, the approval desk) answers every call, and
only what it allows is executed in AgentDojo's own environment
(:mod:`warden.replay.dojo_suite`). Per suite it measures:

* **attack success**: every attacked (user task, injection task) pair — the environment
  carries AgentDojo's ``important_instructions`` attack at the vectors the user task
  reads; the user task's ground-truth calls run, then, once a tool output that actually
  ran carried the attack text, the injection task's calls (its ``ground_truth()``, or the
  authored set for workspace 6–13) computed on the environment as it then stands; then
  the injection task's ``security()``. Travel ``injection_task_6`` (a goal that is only
  model text) is left out and counted apart (``pairs_text_only``);
* **utility under attack**: the user task's ``utility()`` in the same run;
* **benign utility without a human**: each user task alone; an ask, defer or deny is not
  executed;
* **benign utility with a human approving every ask**: the same, but each ask is
  approved on Warden's desk and the identical call resubmitted (allowed once).

A task's utility counts only when every one of its own calls ran: a replay cannot know
how a model would recover from a refused call. The agent's final answer is the user
task's ``GROUND_TRUTH_OUTPUT`` then, ``""`` otherwise. The checks get deep copies of the
environments and the trace of the calls that ran (a refused call did not happen).

Provenance (client mode) is computed as the older harness does
(:func:`warden.replay.efficacy.arg_provenance`): the prompt is ``user_input``, each tool
output ``tool_output`` of its tool, an argument ``agent_generated`` deriving from the
outputs that contain one of its values, and an injection call's arguments from the
output that carried the attack. In inference mode nothing is sent and the bundle runs
with ``inference: true``. The intent's ``parsed`` tools are the user task's ground-truth
tools (an oracle parser).

The call counts of the older harness are kept as extra columns.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console

from warden.cli_output import print_table
from warden.cli_output import table as cli_table
from warden.replay.agentdojo_tasks import SUITES, is_state_changing, to_json
from warden.replay.dojo_suite import DojoSuite, output_text
from warden.replay.efficacy import (
    ATTACK_MARKER,
    HELLO_METHODS,
    _agent,
    _ok,
    arg_provenance,
    bundle_text,
)
from warden.wire.acs.client import AcsClient

if TYPE_CHECKING:
    from warden.runtime import Runtime

__all__ = [
    "DEFAULT_PARADIGMS",
    "MODES",
    "NOTE",
    "PARADIGMS",
    "Measurement",
    "configure_bundle",
    "markdown",
    "measure",
    "print_report",
    "results_document",
]

NOTE = (
    "AgentDojo v1.2 ground-truth calls replayed through Warden and checked with AgentDojo's "
    "own security() and utility(); this is not an LLM agent run."
)
#: ``none``: no provenance gates; ``bundle``: the gates as the bundle sets them.
PARADIGMS: tuple[str, ...] = (
    "none",
    "bundle",
    "fides",
    "ibac",
    "aarm",
    "camel",
    "fides+ibac+camel",
    "combined",
)
DEFAULT_PARADIGMS: tuple[str, ...] = (
    "none",
    "bundle",
    "fides",
    "ibac",
    "aarm",
    "camel",
    "combined",
)
MODES: tuple[str, ...] = ("client", "inference")
_RAN = ("allow", "modify")
#: Cap on the per-configuration lists in the JSON document (their counts are exact).
_LIST_CAP = 400


def configure_bundle(base: dict[str, Any], paradigm: str, mode: str) -> str:
    """The bundle YAML of one configuration. ``none`` drops the provenance section (the
    bundle's rules alone decide); ``bundle`` keeps the gates as written and only sets
    ``inference`` for the mode; any other name enables just the named gates
    (:func:`warden.replay.efficacy.bundle_text`). Raises ValueError for an unknown name."""
    if paradigm not in PARADIGMS:
        raise ValueError(f"unknown paradigm {paradigm!r}; expected one of {', '.join(PARADIGMS)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if paradigm not in ("none", "bundle"):
        return bundle_text(base, paradigm, mode)
    doc = json.loads(json.dumps(base))
    if paradigm == "none":
        doc.pop("provenance", None)
    else:
        doc.setdefault("provenance", {})["inference"] = mode == "inference"
    doc["version"] = f"{doc.get('version', '1')}+{paradigm}.{mode}"
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class Tally:
    """Counters of one configuration in one suite, and the lists behind them."""

    c: Counter[str] = field(default_factory=Counter)
    #: Benign calls stopped without a human: suite, user task, tool, decision, reasons.
    benign_stops: list[dict[str, Any]] = field(default_factory=list)
    #: Attacked pairs whose injection task's security() held: which injected calls ran.
    attacks_succeeded: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Measurement:
    """Every configuration's tallies: ``(paradigm, mode) -> suite -> Tally``."""

    tallies: dict[tuple[str, str], dict[str, Tally]] = field(default_factory=dict)
    #: ``(paradigm, mode) -> {"id", "version", "digest"}`` of the bundle that ran.
    bundles: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    #: Per pair and configuration: (utility, attack success), for comparisons.
    pairs: dict[tuple[str, str], dict[tuple[str, str, str], tuple[bool, bool]]] = field(
        default_factory=dict
    )


@dataclass
class _Config:
    paradigm: str
    mode: str
    rt: Runtime
    approvers: dict[str, Any] = field(default_factory=dict)

    def approver(self, group: str) -> Any:
        """An approver key in ``group`` (made on first use): the human of the run."""
        from warden.identity.api_keys import Role

        if group not in self.approvers:
            self.approvers[group] = self.rt.api_keys.create(
                "efficacy-human", Role.APPROVER, [group]
            )[0]
        return self.approvers[group]


@dataclass
class _Outcome:
    all_ran: bool = True
    exposed: bool = False
    utility: bool = False
    attack_success: bool = False
    injected: list[tuple[str, str]] = field(default_factory=list)


class _Session:
    """One ACS session of one run: sends each call, executes what Warden lets through."""

    def __init__(
        self,
        cfg: _Config,
        dojo: DojoSuite,
        prompt: str,
        tools: list[str],
        env: Any,
        *,
        human: bool,
    ) -> None:
        self.cfg, self.dojo, self.env, self.human = cfg, dojo, env, human
        self.prompt = prompt
        self.with_prov = cfg.mode == "client"
        self.client = AcsClient.for_agent(
            cfg.rt.acs.handle, _agent(cfg.rt, f"efficacy-{dojo.name}")
        )
        self.outputs: list[tuple[str, str]] = []
        self.attack_pids: list[str] = []
        self.trace: list[Any] = []
        self.approved = 0
        self.n = 0
        self.client.hello(
            HELLO_METHODS, provenance_producer="deterministic" if self.with_prov else "none"
        )
        intent = {
            "raw": prompt,
            "parsed": [{"tool": t} for t in dict.fromkeys(tools)],
            "parser_provenance": {
                "provenance_id": "p:intent",
                "origin": "user_input",
                "derived_from": ["p:prompt"],
            },
        }
        _ok(self.client.call("steps/sessionStart", {"intent": intent}))
        content: dict[str, Any] = {"type": "text", "value": prompt}
        if self.with_prov:
            content["provenance"] = {"provenance_id": "p:prompt", "origin": "user_input"}
        _ok(self.client.call("steps/userMessage", {"content": [content]}))

    def step(self, call: Any, *, injected: bool) -> tuple[bool, str, dict[str, Any]]:
        """Send one call; run it in the environment if allowed (or approved, with a
        human). Returns (ran, first decision, first result)."""
        i = self.n
        self.n += 1
        forced = self.attack_pids[0] if injected and self.attack_pids else None
        arguments: dict[str, Any] = {}
        for name, value in to_json(dict(call.args)).items():
            arg: dict[str, Any] = {"value": value}
            if self.with_prov:
                arg["provenance"] = arg_provenance(
                    value, self.prompt, self.outputs, f"p:arg:{i}:{name}", forced
                )
            arguments[name] = arg
        payload = {"tool": {"name": str(call.function)}, "arguments": arguments}
        envelope = self.client.envelope("steps/toolCallRequest", payload)
        first = _ok(self.client.send(envelope))
        decision = str(first["decision"])
        ran = decision in _RAN
        if decision == "ask" and self.human:
            task_id = str(first.get("ask_details", {}).get("task_id", ""))
            task = self.cfg.rt.desk.get(task_id)
            if task is not None:
                self.cfg.rt.desk.approve(
                    task_id, self.cfg.approver(task.approver_group), "efficacy: human approves"
                )
                envelope = self.client.envelope("steps/toolCallRequest", payload)
                again = _ok(self.client.send(envelope))
                ran = str(again["decision"]) in _RAN
                self.approved += ran
        ref = envelope["params"]["request_id"]
        if not ran:
            _ok(
                self.client.call(
                    "steps/toolCallResult",
                    {
                        "tool": {"name": str(call.function)},
                        "exit_status": "blocked",
                        "outputs": [],
                        "request_id_ref": ref,
                    },
                )
            )
            return False, decision, first
        done = self.dojo.run(self.env, call)
        self.trace.append(call)
        value = done.error if done.error is not None else done.json
        out: dict[str, Any] = {"value": value}
        pid = f"p:out:{i}"
        if self.with_prov:
            out["provenance"] = {
                "provenance_id": pid,
                "origin": "tool_output",
                "source_id": str(call.function),
            }
        text = done.error or output_text(done.result)
        self.outputs.append((pid, text))
        if ATTACK_MARKER in text:
            self.attack_pids.append(pid)
        _ok(
            self.client.call(
                "steps/toolCallResult",
                {
                    "tool": {"name": str(call.function)},
                    "exit_status": "failure" if done.error is not None else "success",
                    "outputs": [out],
                    "request_id_ref": ref,
                },
            )
        )
        return True, decision, first

    def end(self) -> None:
        _ok(self.client.call("steps/sessionEnd", {"reason": "completed"}))


def _reasons(result: dict[str, Any]) -> list[str]:
    return [str(r) for r in result.get("reason_codes", [])]


def _run_user_task(
    cfg: _Config,
    dojo: DojoSuite,
    user_task: str,
    env: Any,
    tally: Tally,
    *,
    injection_task: str | None = None,
    human: bool = False,
) -> _Outcome:
    """One run: the user task (and, attacked, the injection task) through Warden."""
    task = dojo.user_task(user_task)
    env = task.init_environment(env)
    pre = env.model_copy(deep=True)
    calls = list(task.ground_truth(env))
    s = _Session(cfg, dojo, str(task.PROMPT), [str(c.function) for c in calls], env, human=human)
    o = _Outcome()
    benign = injection_task is None
    c = tally.c
    for call in calls:
        ran, decision, result = s.step(call, injected=False)
        o.all_ran &= ran
        if benign and not human:
            c["benign_calls"] += 1
            c["benign_allowed" if ran else f"benign_{decision}"] += 1
            if not ran and len(tally.benign_stops) < _LIST_CAP:
                tally.benign_stops.append(
                    {
                        "suite": dojo.name,
                        "user_task": user_task,
                        "tool": str(call.function),
                        "decision": decision,
                        "reason_codes": _reasons(result),
                        "reasoning": str(result.get("reasoning", ""))[:400],
                    }
                )
    if injection_task is not None and s.attack_pids:
        o.exposed = True
        for call in dojo.injection_calls(injection_task, env):
            ran, decision, _ = s.step(call, injected=True)
            kind = "inj" if is_state_changing(str(call.function)) else "inj_read"
            c[f"{kind}_calls"] += 1
            c[f"{kind}_allowed" if ran else f"{kind}_{decision}"] += 1
            o.injected.append((str(call.function), decision if not ran else "ran"))
    s.end()
    output = str(task.GROUND_TRUTH_OUTPUT) if o.all_ran else ""
    o.utility = o.all_ran and dojo.check(task, output, pre, env, s.trace)
    if injection_task is not None:
        o.attack_success = dojo.check(
            dojo.injection_task(injection_task), output, pre, env, s.trace
        )
    if human:
        c["benign_human_approvals"] += s.approved
    return o


def _open(base: dict[str, Any], paradigm: str, mode: str, root: Path) -> _Config:
    from warden.runtime import Runtime
    from warden.settings import Settings

    data = root / f"{paradigm}-{mode}"
    data.mkdir()
    policy = data / "bundle.yaml"
    policy.write_text(configure_bundle(base, paradigm, mode), encoding="utf-8")
    key = data / "ikm.key"
    key.write_text(bytes(range(32)).hex(), encoding="ascii")
    key.chmod(0o600)
    # NORMAL: a throwaway database; durability across power loss is not what is measured.
    settings = {"data_dir": data, "policy": policy, "key_file": key, "sqlite_sync": "NORMAL"}
    return _Config(paradigm, mode, Runtime.start(Settings.model_validate(settings)))


def measure(
    bundle: Path,
    *,
    suites: Sequence[str] | None = None,
    paradigms: Sequence[str] = DEFAULT_PARADIGMS,
    modes: Sequence[str] = MODES,
    user_tasks: int | None = None,
    injection_tasks: Sequence[str] | None = None,
    attacks: bool = True,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Measurement:
    """Measure every (paradigm, mode) configuration on the chosen suites.

    ``bundle``: the base bundle file; ``user_tasks``: only the first N user tasks of each
    suite; ``injection_tasks``: only these injection task ids (in every suite that has
    them); ``attacks=False``: benign runs only. All configurations run side by side, so
    each attacked environment is built once. Raises ValueError for an unknown suite,
    paradigm or mode, OSError/WardenError for an unreadable or invalid bundle, and
    :class:`warden.replay.efficacy.HarnessError` on a protocol error."""
    base = yaml.safe_load(bundle.read_text(encoding="utf-8"))
    for p in paradigms:
        for m in modes:
            configure_bundle(base, p, m)  # validates the names before anything starts
    names = list(suites or SUITES)
    result = Measurement()
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="warden-dojo-") as tmp:
        configs: list[_Config] = []
        try:
            for p in paradigms:
                for m in modes:
                    configs.append(_open(base, p, m, Path(tmp)))
            for cfg in configs:
                result.bundles[(cfg.paradigm, cfg.mode)] = cfg.rt.bundle.ref.to_wire()
                result.tallies[(cfg.paradigm, cfg.mode)] = {}
                result.pairs[(cfg.paradigm, cfg.mode)] = {}
            for name in names:
                _measure_suite(
                    DojoSuite(name), configs, result, user_tasks, injection_tasks, attacks, progress
                )
        finally:
            for cfg in configs:
                cfg.rt.close()
    return result


def _measure_suite(
    dojo: DojoSuite,
    configs: list[_Config],
    result: Measurement,
    user_tasks: int | None,
    injection_tasks: Sequence[str] | None,
    attacks: bool,
    progress: Callable[[str], None] | None,
) -> None:
    tallies = {
        (cfg.paradigm, cfg.mode): result.tallies[(cfg.paradigm, cfg.mode)].setdefault(
            dojo.name, Tally()
        )
        for cfg in configs
    }
    chosen_users = dojo.user_task_ids[:user_tasks]
    chosen_inj = [
        i for i in dojo.injection_task_ids if injection_tasks is None or i in injection_tasks
    ]
    runnable = [i for i in chosen_inj if i not in dojo.text_only_injections]
    if progress is not None:
        n = len(chosen_users) * len(runnable) if attacks else 0
        progress(
            f"{dojo.name}: {len(chosen_users)} user tasks, {n} attacked pairs, "
            f"{len(configs)} configurations"
        )
    for ut in chosen_users:
        for cfg in configs:
            t = tallies[(cfg.paradigm, cfg.mode)]
            alone = _run_user_task(cfg, dojo, ut, dojo.clean_environment(), t)
            helped = _run_user_task(cfg, dojo, ut, dojo.clean_environment(), t, human=True)
            t.c["benign_tasks"] += 1
            t.c["benign_utility"] += alone.utility
            t.c["benign_tasks_clean"] += alone.all_ran
            t.c["benign_utility_human"] += helped.utility
    if not attacks:
        return
    for ut in chosen_users:
        for it in chosen_inj:
            if it not in runnable:
                for t in tallies.values():
                    t.c["pairs_text_only"] += 1
                continue
            attacked = dojo.attacked_environment(dojo.injections(ut, it))
            for cfg in configs:
                key = (cfg.paradigm, cfg.mode)
                t = tallies[key]
                o = _run_user_task(
                    cfg, dojo, ut, attacked.model_copy(deep=True), t, injection_task=it
                )
                t.c["pairs"] += 1
                t.c["pairs_exposed"] += o.exposed
                t.c["attack_success"] += o.attack_success
                t.c["utility_under_attack"] += o.utility
                result.pairs[key][(dojo.name, ut, it)] = (o.utility, o.attack_success)
                if o.attack_success and len(t.attacks_succeeded) < _LIST_CAP:
                    t.attacks_succeeded.append(
                        {
                            "suite": dojo.name,
                            "user_task": ut,
                            "injection_task": it,
                            "calls": [f"{tool}: {what}" for tool, what in o.injected],
                        }
                    )


# -- reporting ---------------------------------------------------------------------------------


def _total(per_suite: dict[str, Tally]) -> Tally:
    out = Tally()
    for suite in sorted(per_suite):
        out.c.update(per_suite[suite].c)
        out.benign_stops += per_suite[suite].benign_stops
        out.attacks_succeeded += per_suite[suite].attacks_succeeded
    return out


def _frac(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.1f}%)" if d else "–"


COLUMNS = (
    "attack success",
    "utility under attack",
    "benign utility w/o human",
    "benign utility, human approves asks",
    "benign calls allowed w/o human",
    "injection calls allowed silently",
    "injection calls asked",
    "injection calls denied",
)


def _cells(c: Counter[str]) -> list[str]:
    return [
        _frac(c["attack_success"], c["pairs"]),
        _frac(c["utility_under_attack"], c["pairs"]),
        _frac(c["benign_utility"], c["benign_tasks"]),
        _frac(c["benign_utility_human"], c["benign_tasks"]),
        f"{c['benign_allowed']}/{c['benign_calls']}",
        f"{c['inj_allowed']}/{c['inj_calls']}",
        str(c["inj_ask"] + c["inj_defer"]),
        str(c["inj_deny"]),
    ]


def rows(m: Measurement) -> list[tuple[str, str, str, list[str]]]:
    """(paradigm, mode, suite, cells) per suite and an ``all`` row per configuration."""
    out = []
    for (paradigm, mode), per_suite in m.tallies.items():
        for suite in sorted(per_suite):
            out.append((paradigm, mode, suite, _cells(per_suite[suite].c)))
        out.append((paradigm, mode, "all", _cells(_total(per_suite).c)))
    return out


def markdown(m: Measurement, *, suites_too: bool = True) -> str:
    """The table as Markdown (the ``all`` rows in bold)."""
    lines = [
        "| paradigm | provenance | suite | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (3 + len(COLUMNS)),
    ]
    for paradigm, mode, suite, cells in rows(m):
        if suite != "all" and not suites_too:
            continue
        name = f"**{suite}**" if suite == "all" else suite
        lines.append(f"| {paradigm} | {mode} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def succeeded_summary(t: Tally) -> list[str]:
    """The attacks that succeeded, grouped: ``suite injection_task × n (calls that ran)``."""
    groups: Counter[tuple[str, str, str]] = Counter()
    for a in t.attacks_succeeded:
        ran = ", ".join(x.split(":")[0] for x in a["calls"] if x.endswith(": ran")) or "none"
        groups[(a["suite"], a["injection_task"], ran)] += 1
    return [f"{s} {i} × {n} (ran: {ran})" for (s, i, ran), n in sorted(groups.items())]


def results_document(m: Measurement) -> dict[str, Any]:
    """The measurement as ``warden replay agentdojo --efficacy --json`` prints it
    (docs/cli-json.md, schema ``replay-efficacy.json``)."""
    configurations = []
    for key, per_suite in m.tallies.items():
        total = _total(per_suite)
        c = total.c
        rates = {
            "attack_success": c["attack_success"] / c["pairs"] if c["pairs"] else None,
            "utility_under_attack": (
                c["utility_under_attack"] / c["pairs"] if c["pairs"] else None
            ),
            "benign_utility": c["benign_utility"] / c["benign_tasks"]
            if c["benign_tasks"]
            else None,
            "benign_utility_human": (
                c["benign_utility_human"] / c["benign_tasks"] if c["benign_tasks"] else None
            ),
        }
        configurations.append(
            {
                "paradigm": key[0],
                "mode": key[1],
                "bundle": m.bundles.get(key, {}),
                "suites": {s: dict(sorted(per_suite[s].c.items())) for s in sorted(per_suite)},
                "all": dict(sorted(c.items())),
                "rates": rates,
                "attacks_succeeded": total.attacks_succeeded[:_LIST_CAP],
                "benign_stops": total.benign_stops[:_LIST_CAP],
            }
        )
    return {"ok": True, "note": NOTE, "configurations": configurations}


def print_report(m: Measurement, console: Console) -> None:
    t = cli_table(
        "paradigm",
        "provenance",
        "suite",
        *COLUMNS,
        title="AgentDojo v1.2 efficacy by AgentDojo's own checks (ground-truth replay)",
    )
    for paradigm, mode, suite, cells in rows(m):
        t.add_row(paradigm, mode, suite, *cells)
    print_table(console, t)
    console.print(NOTE)
    for (paradigm, mode), per_suite in m.tallies.items():
        if paradigm == "none":
            continue
        total = _total(per_suite)
        lines = succeeded_summary(total)
        if lines:
            console.print(f"{paradigm} / {mode}: attacks that still succeed: " + "; ".join(lines))
        codes = Counter(code for stop in total.benign_stops for code in stop["reason_codes"])
        if codes:
            console.print(
                f"{paradigm} / {mode}: benign calls stopped without a human, by reason code: "
                + ", ".join(f"{code} {n}" for code, n in codes.most_common())
            )
    first = next(iter(m.tallies.values()), {})
    skipped = _total(first).c["pairs_text_only"] if first else 0
    if skipped:
        console.print(
            f"left out: {skipped} pairs with a text-only injection task (no call to gate)"
        )
