"""What a replay found, as one JSON document (``warden whatif --json``; schema
``warden/schemas/cli/whatif.json``) and as tables for a terminal.

The document holds counts and the first :data:`EXAMPLES` examples of each group, never
every decision, so it stays small whatever the history's size:

* ``faithfulness``: the recorded bundle run again (reproduced, marked, unreproduced
  with examples, not checked for want of the bundle);
* ``matrix``: old → new decision counts (old = the recorded bundle's policy-level
  verdict, new = the candidate's);
* ``changes``: totals of loosened (a weaker effect: deny/ask → allow first),
  tightened and rules-only changes, with examples, loosened first;
* ``by_rule``, ``by_tool``, ``by_agent``, ``by_wire``: changes per group with first
  examples; ``never_fired``: the candidate's rules that fired on no replayed decision;
* ``marked``: decisions whose recorded outcome came from state (budget, human,
  preempted), with the candidate's policy-level verdict beside them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from warden.cli_output import print_table, table
from warden.core.types import BundleRef
from warden.whatif.replay import Replayed, change_kind

#: Examples kept per group.
EXAMPLES = 3
#: Examples kept of each change kind and of unreproduced decisions.
LIST_EXAMPLES = 20
DECISIONS = ("allow", "modify", "defer", "ask", "deny")


def _loosened_order(ex: dict[str, Any]) -> int:
    """deny/ask → allow first, then the other loosenings."""
    return 0 if ex["new"]["decision"] == "allow" and ex["old"]["decision"] in ("deny", "ask") else 1


@dataclass
class _Group:
    changes: int = 0
    loosened: int = 0
    tightened: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, example: dict[str, Any]) -> None:
        self.changes += 1
        if kind == "loosened":
            self.loosened += 1
        elif kind == "tightened":
            self.tightened += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)

    def as_dict(self) -> dict[str, Any]:
        return {
            "changes": self.changes,
            "loosened": self.loosened,
            "tightened": self.tightened,
            "examples": self.examples,
        }


class WhatIfReport:
    """Accumulates :class:`Replayed` decisions; :meth:`document` gives the report."""

    def __init__(self, candidate: BundleRef, candidate_rules: list[str]) -> None:
        self.candidate = candidate
        self.candidate_rules = candidate_rules
        self.total = 0
        self.matrix: Counter[tuple[str, str]] = Counter()
        self.kinds: Counter[str] = Counter()
        self.lists: dict[str, list[dict[str, Any]]] = {"loosened": [], "tightened": [], "rules": []}
        self.groups: dict[str, dict[str, _Group]] = {
            "rule": {},
            "tool": {},
            "agent": {},
            "wire": {},
        }
        self.fired: set[str] = set()
        self.faith: Counter[str] = Counter()
        self.unreproduced: list[dict[str, Any]] = []
        self.marks: Counter[str] = Counter()
        self.marked: list[dict[str, Any]] = []
        self.bundles: Counter[str] = Counter()

    def add(self, d: Replayed) -> None:
        self.total += 1
        self.fired.update(d.new.rules)
        self.matrix[(d.old.decision, d.new.decision)] += 1
        self.bundles[d.recorded_digest] += 1
        if d.faithful is None:
            self.faith["not_checked"] += 1
        elif d.mark == "preempted":
            self.faith["preempted"] += 1
        elif d.faithful:
            self.faith["reproduced"] += 1
        else:
            self.faith["unreproduced"] += 1
            if len(self.unreproduced) < LIST_EXAMPLES:
                ex = d.example()
                ex["replayed"] = d.current.as_dict() if d.current is not None else None
                self.unreproduced.append(ex)
        if d.mark is not None:
            self.marks[d.mark] += 1
            if len(self.marked) < LIST_EXAMPLES:
                self.marked.append(d.example())
        kind = change_kind(d.old, d.new)
        if kind is None:
            return
        self.kinds[kind] += 1
        example = d.example()
        bucket = self.lists[kind]
        if len(bucket) < LIST_EXAMPLES * 4:
            bucket.append(example)
        rules = set(d.old.rules) ^ set(d.new.rules) or set(d.old.rules) | set(d.new.rules)
        for rule in sorted(rules) or ["(bundle default)"]:
            self.groups["rule"].setdefault(rule, _Group()).add(kind, example)
        for name, key in (("tool", d.tool), ("agent", d.agent or "(none)"), ("wire", d.wire)):
            self.groups[name].setdefault(key, _Group()).add(kind, example)

    def document(
        self,
        *,
        source: dict[str, str],
        window: dict[str, Any],
        skipped: dict[str, int],
        seconds: float,
        fail_on: str | None,
        allow_unfaithful: bool = False,
        faithfulness_applies: bool = True,
    ) -> dict[str, Any]:
        """The report (see the module docstring); ``ok`` is False when ``fail_on``
        (``loosen`` or ``any``) found what it fails on, or when ``fail_on`` is given and
        the replay is not faithful (a decision not reproduced or not checked: the
        comparison then rests on guesses) unless ``allow_unfaithful``.
        ``faithfulness_applies`` False (shadow divergences: nothing was replayed) gives
        ``faithfulness: null``. ``warnings`` lists what the reader should know (the gate
        failed for want of faithfulness, …); callers append theirs."""
        loosened = sorted(self.lists["loosened"], key=_loosened_order)[:LIST_EXAMPLES]
        changed = self.kinds["loosened"] + self.kinds["tightened"]
        failed = (fail_on == "loosen" and self.kinds["loosened"] > 0) or (
            fail_on == "any" and changed > 0
        )
        checked = self.faith["reproduced"] + self.faith["unreproduced"]
        faithful = self.faith["unreproduced"] == 0 and self.faith["not_checked"] == 0
        warnings: list[str] = []
        if faithfulness_applies and fail_on is not None and not faithful:
            why = (
                f"the replay is not faithful ({self.faith['unreproduced']} decisions not "
                f"reproduced, {self.faith['not_checked']} not checked for want of their "
                "bundle: pass --current)"
            )
            if allow_unfaithful:
                warnings.append(f"{why}; the gate ignores it (--allow-unfaithful)")
            else:
                failed = True
                warnings.append(
                    f"{why}: --fail-on {fail_on} fails (pass --allow-unfaithful to gate on "
                    "the changes alone)"
                )
        faithfulness: dict[str, Any] | None = (
            {
                "faithful": faithful,
                "checked": checked,
                "reproduced": self.faith["reproduced"],
                "unreproduced": self.faith["unreproduced"],
                "preempted": self.faith["preempted"],
                "not_checked": self.faith["not_checked"],
                "marked": dict(sorted(self.marks.items())),
                "examples": self.unreproduced,
            }
            if faithfulness_applies
            else None
        )
        return {
            "ok": not failed,
            "fail_on": fail_on,
            "candidate": self.candidate.to_wire(),
            "source": source,
            "window": window,
            "decisions": self.total,
            "skipped": dict(sorted(skipped.items())),
            "seconds": round(seconds, 3),
            "decisions_per_second": round(self.total / seconds) if seconds > 0 else None,
            "recorded_bundles": dict(self.bundles.most_common()),
            "faithfulness": faithfulness,
            "matrix": {
                old: {new: n for (o, new), n in sorted(self.matrix.items()) if o == old}
                for old in sorted({o for o, _ in self.matrix})
            },
            "changes": {
                "total": changed + self.kinds["rules"],
                "decision_changes": changed,
                "loosened": self.kinds["loosened"],
                "tightened": self.kinds["tightened"],
                "rules_only": self.kinds["rules"],
            },
            "loosened": loosened,
            "tightened": self.lists["tightened"][:LIST_EXAMPLES],
            "rules_only": self.lists["rules"][:LIST_EXAMPLES],
            "by_rule": _groups(self.groups["rule"]),
            "by_tool": _groups(self.groups["tool"]),
            "by_agent": _groups(self.groups["agent"]),
            "by_wire": _groups(self.groups["wire"]),
            "never_fired": [r for r in self.candidate_rules if r not in self.fired],
            "marked": self.marked,
            "warnings": warnings,
        }


def _groups(groups: dict[str, _Group]) -> dict[str, Any]:
    """Groups by most loosened, then most changes, then name."""
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1].loosened, -kv[1].changes, kv[0]))
    return {k: g.as_dict() for k, g in ordered}


def counts(by_key: dict[str, int]) -> str:
    """``{"warden/agents": 1, "warden/approval": 4}`` as ``warden/agents 1, warden/approval
    4`` (``none`` when empty): counts for people, not a Python dict's repr."""
    return ", ".join(f"{k} {n}" for k, n in by_key.items()) or "none"


def _line(ex: dict[str, Any]) -> str:
    old, new = ex["old"], ex["new"]
    where = f"#{ex['log_index']}" if ex.get("log_index") is not None else ex["session_id"][:8]
    # Escaped: the rule list's brackets (and any name) must not read as Rich markup.
    return escape(
        f"{where} {ex['timestamp']} {ex['agent']} {ex['wire']}:{ex['tool']} "
        f"{old['decision']}→{new['decision']} "
        f"[{', '.join(old['rules']) or 'default'} → {', '.join(new['rules']) or 'default'}]"
    )


def print_report(doc: dict[str, Any], out: Console) -> None:
    """The report for a terminal: faithfulness, the matrix, loosened changes first, then
    the groups and the rules that never fired."""
    c = doc["candidate"]
    out.print(
        escape(
            f"what if {c['id']}@{c['version']} ({c['digest'][:19]}…) had decided "
            f"{doc['decisions']} recorded decisions from {doc['source']['kind']} "
            f"{doc['source']['where']} ({doc['decisions_per_second'] or '-'} decisions/s)"
        )
    )
    if doc["faithfulness"] is not None:  # None: shadow divergences, nothing was replayed
        _print_faithfulness(doc["faithfulness"], out)
        for ex in doc["marked"][:EXAMPLES]:
            out.print(
                f"  marked {ex['mark']}: {_line(ex)} (recorded {ex['recorded']['decision']}: "
                "state policy does not compute decided it)"
            )
    _print_changes(doc, out)


def _print_faithfulness(f: dict[str, Any], out: Console) -> None:
    verdict = "faithful" if f["faithful"] else "NOT faithful"
    out.print(
        f"replay of the recorded bundles: {verdict}: {f['reproduced']} reproduced, "
        f"{f['unreproduced']} not reproduced, {f['not_checked']} not checked (bundle not "
        f"available: pass --current), {f['preempted']} preempted; marked (state policy does "
        + escape(f"not compute): {counts(f['marked'])}")
    )
    for ex in f["examples"]:
        rep = ex.get("replayed") or {}
        out.print(
            f"  [red]not reproduced[/red] {_line(ex)} "
            + escape(
                f"recorded {ex['recorded']['decision']} {ex['recorded']['rules']}, "
                f"replayed {rep.get('decision')} {rep.get('rules')}"
            )
        )


def _print_changes(doc: dict[str, Any], out: Console) -> None:
    t = table("old \\ new", *DECISIONS, title="decisions: recorded policy → candidate")
    for old in DECISIONS:
        row = doc["matrix"].get(old)
        if row:
            t.add_row(old, *(str(row.get(new, 0)) for new in DECISIONS))
    print_table(out, t)
    ch = doc["changes"]
    out.print(
        f"changes: {ch['decision_changes']} decisions ({ch['loosened']} loosened, "
        f"{ch['tightened']} tightened), {ch['rules_only']} with other rules only"
    )
    for ex in doc["loosened"]:
        out.print(f"  [yellow]loosened[/yellow] {_line(ex)}")
    for ex in doc["tightened"][: EXAMPLES * 2]:
        out.print(f"  tightened {_line(ex)}")
    for name in ("rule", "tool", "agent", "wire"):
        groups = doc[f"by_{name}"]
        if not groups:
            continue
        g = table(name, "changes", "loosened", "tightened", "first example", title=f"by {name}")
        for key, v in list(groups.items())[:20]:
            first = _line(v["examples"][0]) if v["examples"] else ""
            g.add_row(
                escape(key), str(v["changes"]), str(v["loosened"]), str(v["tightened"]), first
            )
        print_table(out, g)
    never = doc["never_fired"]
    out.print(escape(f"candidate rules that never fired: {', '.join(never) if never else 'none'}"))
    if doc["skipped"]:
        out.print(escape(f"not replayed: {counts(doc['skipped'])}"))
