"""Bundle lint for ``warden policy check``: rules and charges that cannot do what they say.

A bundle that loads is valid; lint finds what is valid and still wrong
(docs/policy-testing.md, "Lint"). Each :class:`Finding` names the rule or charge:

- ``shadowed`` — a rule that never decides: another rule whose target (hooks and tools)
  covers the rule's and whose condition is always true (absent, or the literal
  ``true``) always fires beside it with a stronger effect, so the rule never wins (a
  ``modify`` rule under an ``ask``/``defer`` is not reported: a granted ask still applies
  its modifications). With an equal effect, an earlier such rule makes a later one
  redundant when the later adds no reason code and no ``warn``.
- ``no_tool_on_hook`` — a rule with ``tools`` whose hooks never carry a tool name (only
  ``tools/call`` among wrapped MCP methods does; among the step hooks only
  ``toolCallRequest`` and ``toolCallResult``), so it never matches a conforming request.
- ``effect_not_permitted`` — a rule whose effect none of its hooks permits (specs/acs.md
  §7): every verdict it wins is substituted (``disposition_not_permitted``).
- ``unmatched_tool_pattern`` — with a tool list (``--tools``, the MCP ``tools/list``
  result): a rule's or charge's tool pattern that matches none of the tools.
- ``charge_without_budget`` — a ``spend`` charge that can name no budget: its
  ``budget_expr`` indexes a ``data`` map that is missing or empty, or (with a budgets
  file) it names a budget the file does not define. Every call it prices is denied
  (``unknown_budget``).

Lint only reads the bundle; it evaluates no condition.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warden.core.hooks import STEP_METHODS, WARDEN_METHODS
from warden.core.tool_names import fold_patterns, matches_any
from warden.core.types import ALL_EFFECTS, Effect
from warden.errors import ConfigError
from warden.policy.bundle import MCP_EXAMPLES, Bundle, Charge, Rule
from warden.wire.acs.methods import HOOKS

#: Methods whose requests carry a tool name rules can match (wire/acs/parse.py,
#: wire/acs/mcp.py ``tool_facts``; every Warden wire names its action as the tool).
TOOL_NAMED = frozenset(
    {"steps/toolCallRequest", "steps/toolCallResult", "protocols/MCP/tools/call", *WARDEN_METHODS}
)
KNOWN_METHODS = (*STEP_METHODS, *WARDEN_METHODS, *MCP_EXAMPLES)
_DATA_INDEX = re.compile(r"^\s*data\.([A-Za-z_][A-Za-z0-9_]*)\s*\[[^\]]+\]\s*$")


@dataclass(frozen=True)
class Finding:
    """One lint warning: its code, the rule or charge id (``kind`` says which) and why."""

    code: str
    kind: str  # "rule" | "charge"
    id: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "kind": self.kind, "id": self.id, "message": self.message}


def _always_true(rule: Rule) -> bool:
    return rule.condition is None or rule.condition.source.strip() == "true"


def _glob_covers(outer: str, inner: str) -> bool:
    """Whether glob ``outer`` matches every name glob ``inner`` matches (conservative:
    only equal globs, a literal ``inner`` that ``outer`` matches, or an ``outer`` whose
    only wildcard is ``*`` matching ``inner``'s text)."""
    if outer == inner:
        return True
    inner_glob = any(c in inner for c in "*?[")
    if not inner_glob:
        return fnmatch.fnmatchcase(inner, outer)
    return not any(c in outer for c in "?[") and fnmatch.fnmatchcase(inner, outer)


def _methods_covered(outer: Rule, inner: Rule) -> bool:
    return all(any(_glob_covers(o, i) for o in outer.hooks) for i in inner.hooks)


def _tools_covered(outer: Rule, inner: Rule) -> bool:
    if outer.tools is None:
        return True
    if inner.tools is None:
        return False
    if outer.spec.case_sensitive and not inner.spec.case_sensitive:
        return False
    # Compare as matched: folded unless case-sensitive (a caseless outer folds inner too).
    inner_pats = inner.tool_patterns if outer.spec.case_sensitive else fold_patterns(inner.tools)
    return all(any(_glob_covers(o, i) for o in outer.tool_patterns) for i in inner_pats)


def _covers(outer: Rule, inner: Rule) -> bool:
    return _methods_covered(outer, inner) and _tools_covered(outer, inner)


def _shadowed(rules: tuple[Rule, ...]) -> list[Finding]:
    out: list[Finding] = []
    for inner in rules:
        for outer in rules:
            if outer is inner or not _always_true(outer) or not _covers(outer, inner):
                continue
            s_out, s_in = outer.effect.strength, inner.effect.strength
            if s_out > s_in:
                if inner.effect is Effect.MODIFY and outer.effect in (Effect.ASK, Effect.DEFER):
                    continue  # a granted ask still applies the modifications
                out.append(
                    Finding(
                        "shadowed",
                        "rule",
                        inner.id,
                        f"rule {inner.id} ({inner.effect.value}) never decides: rule "
                        f"{outer.id} ({outer.effect.value}, "
                        f"{'no condition' if outer.condition is None else 'when: true'}) "
                        f"covers every step it matches and is stronger",
                    )
                )
                break
            if (
                s_out == s_in
                and outer.order < inner.order
                and set(inner.spec.reason_codes) <= set(outer.spec.reason_codes)
                and (not inner.spec.warn or outer.spec.warn)
            ):
                out.append(
                    Finding(
                        "shadowed",
                        "rule",
                        inner.id,
                        f"rule {inner.id} ({inner.effect.value}) is redundant: the earlier rule "
                        f"{outer.id} ({outer.effect.value}, "
                        f"{'no condition' if outer.condition is None else 'when: true'}) "
                        "covers every step it matches with the same effect and reason codes",
                    )
                )
                break
    return out


def _matched_methods(rule: Rule) -> list[str]:
    return [m for m in KNOWN_METHODS if rule.matches_method(m)]


def _hook_findings(rules: tuple[Rule, ...]) -> list[Finding]:
    out: list[Finding] = []
    for rule in rules:
        methods = _matched_methods(rule)
        if rule.tools is not None and not any(m in TOOL_NAMED for m in methods):
            out.append(
                Finding(
                    "no_tool_on_hook",
                    "rule",
                    rule.id,
                    f"rule {rule.id} matches tools {list(rule.tools)} on hooks "
                    f"{list(rule.hooks)}, which carry no tool name (only steps/toolCallRequest, "
                    "steps/toolCallResult, protocols/MCP/tools/call and the Warden methods "
                    "do): it never fires",
                )
            )
        permitted: set[Effect] = set()
        for m in methods:
            permitted |= HOOKS[m][1] if m in HOOKS else ALL_EFFECTS
        if methods and rule.effect not in permitted:
            out.append(
                Finding(
                    "effect_not_permitted",
                    "rule",
                    rule.id,
                    f"rule {rule.id} says {rule.effect.value}, which none of its hooks "
                    f"{list(rule.hooks)} permits: whenever it wins, the answer is substituted "
                    "(disposition_not_permitted)",
                )
            )
    return out


def _charge_patterns(charge: Charge) -> list[str]:
    return list(charge.tools)


def _tool_findings(bundle: Bundle, tools: list[str]) -> list[Finding]:
    out: list[Finding] = []
    for rule in bundle.rules:
        for raw, pat in zip(rule.tools or (), rule.tool_patterns, strict=True):
            if not any(
                matches_any(t, (pat,), case_sensitive=rule.spec.case_sensitive) for t in tools
            ):
                out.append(
                    Finding(
                        "unmatched_tool_pattern",
                        "rule",
                        rule.id,
                        f"rule {rule.id}: tool pattern {raw!r} matches none of the "
                        f"{len(tools)} listed tools",
                    )
                )
    for charge in bundle.charges:
        for raw in _charge_patterns(charge):
            folded = fold_patterns((raw,))
            if not any(matches_any(t, folded, case_sensitive=False) for t in tools):
                out.append(
                    Finding(
                        "unmatched_tool_pattern",
                        "charge",
                        charge.id,
                        f"charge {charge.id}: tool pattern {raw!r} matches none of the "
                        f"{len(tools)} listed tools",
                    )
                )
    return out


def _budget_findings(bundle: Bundle, budgets: set[str] | None) -> list[Finding]:
    out: list[Finding] = []
    for charge in bundle.charges:
        named: list[str] = []
        if charge.budget is not None:
            named = [charge.budget]
        elif charge.budget_expr is not None:
            m = _DATA_INDEX.match(charge.spec.budget_expr or "")
            if m is None:
                continue  # computed from the request: nothing to check statically
            table = bundle.data.get(m.group(1))
            if not isinstance(table, dict) or not table:
                out.append(
                    Finding(
                        "charge_without_budget",
                        "charge",
                        charge.id,
                        f"charge {charge.id}: budget_expr reads data.{m.group(1)}, which "
                        f"{'is not in' if table is None else 'is empty or not a map in'} the "
                        "bundle's data: no call it prices has a budget (unknown_budget)",
                    )
                )
                continue
            named = [str(v) for v in table.values()]
        if budgets is None:
            continue
        for b in dict.fromkeys(named):
            if b not in budgets:
                out.append(
                    Finding(
                        "charge_without_budget",
                        "charge",
                        charge.id,
                        f"charge {charge.id} charges budget {b!r}, which the budgets file "
                        "does not define (calls it prices are denied unknown_budget)",
                    )
                )
    return out


def lint(
    bundle: Bundle, *, tools: Iterable[str] | None = None, budgets: Iterable[str] | None = None
) -> list[Finding]:
    """Every lint finding of ``bundle``, rules first in bundle order. ``tools`` is a tool
    list to match the patterns against; ``budgets`` the budget ids a budgets file defines."""
    found = _shadowed(bundle.rules) + _hook_findings(bundle.rules)
    if tools is not None:
        # Distinct names: "matches none of the N listed tools" counts tools, not lines.
        found += _tool_findings(bundle, list(dict.fromkeys(tools)))
    found += _budget_findings(bundle, set(budgets) if budgets is not None else None)
    order = {r.id: r.order for r in bundle.rules}
    return sorted(
        found,
        key=lambda f: (f.kind != "rule", order.get(f.id, 0) if f.kind == "rule" else 0),
    )


@dataclass(frozen=True)
class ToolList:
    """A ``--tools`` file: its distinct tool names (first-seen order) and, when the file
    is one page of a paginated ``tools/list`` result, the ``nextCursor`` of the next."""

    names: list[str]
    next_cursor: str | None = None


def read_tool_list(path: Path) -> ToolList:
    """The tool list in ``path``: an MCP ``tools/list`` result (``{"tools": [{"name": …}]}``,
    possibly with ``nextCursor``), the whole JSON-RPC response (``{"result": {"tools": …}}``),
    or a bare list of names or ``{"name": …}`` objects. Repeated names count once.

    Raises :class:`ConfigError` naming the file for an unreadable file, a JSON-RPC error
    response (its code and message shown), another shape, a nameless tool, or an empty
    list (every pattern would be reported as matching nothing)."""
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read tool list: {exc}", reason="tools_invalid") from exc
    if isinstance(doc, dict) and "error" in doc and "result" not in doc:
        err = doc["error"]
        said = (
            f"error {err.get('code')}: {err.get('message')}"
            if isinstance(err, dict)
            else json.dumps(err)
        )
        raise ConfigError(
            f"{path}: a JSON-RPC error response, not a tool list ({said}); give the "
            "result of a tools/list call that succeeded",
            reason="tools_invalid",
        )
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):
        doc = doc["result"]
    items = doc.get("tools") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise ConfigError(
            f'{path}: a tool list is {{"tools": [{{"name": ...}}]}} (MCP tools/list) or a '
            "JSON list of names",
            reason="tools_invalid",
        )
    names: dict[str, None] = {}
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"{path}: tools[{i}]: a tool needs a non-empty string name",
                reason="tools_invalid",
            )
        names[name] = None
    if not names:
        raise ConfigError(
            f"{path}: the tool list is empty: every tool pattern would match none of it; "
            "give the tools/list result of the server the bundle governs",
            reason="tools_invalid",
        )
    cursor = doc.get("nextCursor") if isinstance(doc, dict) else None
    return ToolList(list(names), cursor if isinstance(cursor, str) and cursor else None)


def load_tool_list(path: Path) -> list[str]:
    """The distinct tool names of ``path`` (see :func:`read_tool_list`)."""
    return read_tool_list(path).names


__all__ = ["Finding", "ToolList", "lint", "load_tool_list", "read_tool_list"]
