"""The policy engine: evaluate a bundle against one :class:`ActionRequest`.

Every candidate rule whose condition holds *fires*. The strongest effect wins
(deny > ask > defer > modify > allow); every fired rule is cited. With no rule
fired the bundle default applies (deny unless the bundle says allow). Modify
rules that fire together are merged; a merge that violates ACS §6.3 is an
engine error. Errors raise :class:`~warden.errors.CouldNotDecide`; the Guardian
turns that into a signed deny (``evaluation_failed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from warden.core.modifications import ModificationConflict, check_modifications
from warden.core.tool_names import fold
from warden.core.types import ActionRequest, BundleRef, Effect, PolicyReference
from warden.errors import CouldNotDecide
from warden.policy.bundle import Bundle, Rule
from warden.policy.conditions import ConditionError, ContextPool
from warden.policy.index import RuleIndex


@dataclass(frozen=True)
class RuleTrace:
    """What happened to one candidate rule (for ``warden policy explain``)."""

    rule_id: str
    effect: Effect
    fired: bool
    detail: str
    failed: bool = False  # the condition errored: evaluation stopped here (fail closed)


@dataclass(frozen=True)
class Evaluation:
    """The engine's result before hook-level substitution."""

    effect: Effect
    reasoning: str
    reason_codes: tuple[str, ...]
    fired: tuple[Rule, ...]
    bundle: BundleRef
    references: tuple[PolicyReference, ...]
    warn: bool = False
    modifications: dict[str, Any] | None = None
    ask_details: dict[str, Any] | None = None
    defer_details: dict[str, Any] | None = None
    default_applied: bool = False
    trace: tuple[RuleTrace, ...] = field(default=())


#: False when this module is compiled by mypyc (a native class: no instance ``__dict__``).
_EVALUATION_HAS_DICT = Evaluation.__dictoffset__ != 0


def with_details(
    shared: Evaluation, ask: dict[str, Any] | None, defer: dict[str, Any] | None
) -> Evaluation:
    """``dataclasses.replace(shared, ask_details=ask, defer_details=defer)`` for the
    compiled class: the constructor called directly, a native call where ``replace`` walks
    the fields in Python (~3 µs an ask; decision 333). tests/policy/test_engine_copy.py
    compares it with ``replace``."""
    return Evaluation(
        effect=shared.effect,
        reasoning=shared.reasoning,
        reason_codes=shared.reason_codes,
        fired=shared.fired,
        bundle=shared.bundle,
        references=shared.references,
        warn=shared.warn,
        modifications=shared.modifications,
        ask_details=ask,
        defer_details=defer,
        default_applied=shared.default_applied,
        trace=shared.trace,
    )


_FACTS: dict[str, Any] = {
    "method": lambda r: r.method,
    "tool": lambda r: {**r.tool, "normalized_name": fold(r.tool_name)},
    "args": lambda r: r.args,
    "raw_command": lambda r: r.raw_command,
    "payload": lambda r: r.payload,
    "metadata": lambda r: r.metadata,
    "session": lambda r: r.session,
    "mcp": lambda r: r.mcp,
    "agent": lambda r: r.agent,
    "claims": lambda r: r.claims,
    "provenance": lambda r: r.provenance.facts() if r.provenance is not None else NO_PROVENANCE,
}

#: CEL ``provenance`` when the bundle has no ``provenance`` section or the step no view.
NO_PROVENANCE: dict[str, Any] = {
    "mode": "off",
    "args": {},
    "untrusted_args": [],
    "tool": {"consequential": False, "external_sink": False, "sinks": []},
    "session": {
        "untrusted_entered": False,
        "untrusted_step_ids": [],
        "untrusted_sources": [],
        "earliest_untrusted_step_id": "",
        "steps_since_untrusted": -1,
        "summary": {},
    },
    "intent": {"present": False, "raw": "", "parsed": [], "scope_mode": "", "within": False},
}


def facts_for(
    request: ActionRequest,
    names: frozenset[str],
    fields: dict[str, frozenset[str] | None] | None = None,
) -> dict[str, Any]:
    """The CEL variables ``names`` of a request (docs/policy-bundles.md); ``data``
    comes from the bundle, not the request. ``fields``: per variable, the only
    top-level fields the rules select (None or absent: all), so that converting the
    request into CEL values (the dearest part of evaluating it) skips what no rule can
    read (decision 272)."""
    out: dict[str, Any] = {}
    for n in names:
        if n == "data":
            continue
        value = _FACTS[n](request)
        keep = fields.get(n) if fields is not None else None
        if keep is not None and type(value) is dict:
            value = {k: value[k] for k in keep if k in value}
        out[n] = value
    return out


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


class PolicyEngine:
    """Evaluates one loaded :class:`Bundle`. Thread-safe; immutable after construction."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self._index = RuleIndex(bundle.rules)
        self._contexts = ContextPool(bundle.data)
        self._needs: dict[
            tuple[Rule, ...], tuple[frozenset[str], dict[str, frozenset[str] | None]]
        ] = {}
        self._wire_text: dict[int, bytes] = {}
        #: :meth:`_combine`'s traceless results by fired rules (and wrapped MCP), for the
        #: results without modifications.
        #: With each, the compact text of its ask and defer details (None when absent).
        self._combined: dict[
            tuple[tuple[Rule, ...], bool], tuple[Evaluation, bytes | None, bytes | None]
        ] = {}
        #: Every rule by id (:meth:`rule`).
        self._by_id: dict[str, Rule] = {r.id: r for r in bundle.rules}
        #: The modify rules by id, in bundle order (what :meth:`modifications_of` merges).
        self._modifying: dict[str, Rule] = {
            r.id: r for r in bundle.rules if r.effect is Effect.MODIFY
        }

    def _variables(
        self, candidates: tuple[Rule, ...]
    ) -> tuple[frozenset[str], dict[str, frozenset[str] | None]]:
        """The variables ``candidates`` read, and per variable the fields they select
        (the union; None when one of them reads it whole)."""
        needed = self._needs.get(candidates)
        if needed is None:
            names: set[str] = set()
            fields: dict[str, set[str] | None] = {}
            for r in candidates:
                if r.condition is None:
                    continue
                for v in r.condition.variables:
                    names.add(v)
                    chosen = r.condition.fields.get(v)
                    if v in fields and fields[v] is None:
                        continue  # already read whole
                    if chosen is None:
                        fields[v] = None
                        continue
                    selected = fields.get(v)
                    if selected is None:
                        selected = fields[v] = set()
                    selected.update(chosen)
            needed = (
                frozenset(names),
                {v: (frozenset(f) if f is not None else None) for v, f in fields.items()},
            )
            if len(self._needs) < 4096:
                self._needs[candidates] = needed
        return needed

    def reads(self, request: ActionRequest) -> dict[str, Any]:
        """The CEL variables (``data`` aside) the rules that can match ``request`` read:
        with ``method``, the tool name and the hook's permitted dispositions they decide
        its evaluation, so equal reads give equal verdicts (``warden whatif`` memoizes on
        them). A variable the rules only select fields of holds just those fields."""
        candidates = self._index.candidates(request.method, request.tool_name)
        return facts_for(request, *self._variables(candidates))

    def evaluate(self, request: ActionRequest, *, explain: bool = False) -> Evaluation:
        """Evaluate ``request``. Raises :class:`CouldNotDecide` on any engine error.

        With ``explain`` the result carries a :class:`RuleTrace` per candidate rule, and
        a :class:`CouldNotDecide` carries the trace up to and including the rule that
        failed in ``exc.data["trace"]`` (``warden policy explain``).
        """
        trace: list[RuleTrace] = []
        try:
            return self._evaluate(request, trace, explain=explain)
        except CouldNotDecide as exc:
            if explain:
                exc.data["trace"] = tuple(trace)
            raise

    def _evaluate(
        self, request: ActionRequest, trace: list[RuleTrace], *, explain: bool
    ) -> Evaluation:
        candidates = self._index.candidates(request.method, request.tool_name)
        ctx: Any = None
        fired: list[Rule] = []
        for rule in candidates:
            if rule.condition is not None:
                try:
                    if ctx is None:
                        ctx = self._contexts.for_request(
                            facts_for(request, *self._variables(candidates))
                        )
                    holds = rule.condition.evaluate(ctx)
                except ConditionError as exc:
                    if explain:
                        detail = f"when `{rule.condition.source}` → error: {exc}"
                        trace.append(RuleTrace(rule.id, rule.effect, False, detail, failed=True))
                    raise CouldNotDecide(
                        f"rule {rule.id}: {exc}", reason="evaluation_failed", rule_id=rule.id
                    ) from exc
            else:
                holds = True
            if holds:
                fired.append(rule)
            if explain:
                detail = (
                    f"when `{rule.condition.source}` → {holds}"
                    if rule.condition
                    else "no condition"
                )
                trace.append(RuleTrace(rule.id, rule.effect, holds, detail))
        wrapped_mcp = request.method.startswith("protocols/MCP/")
        if explain:
            return self._combine(fired, tuple(trace), wrapped_mcp=wrapped_mcp)
        key = (tuple(fired), wrapped_mcp)
        cached = self._combined.get(key)
        if cached is None:
            combined = self._combine(fired, (), wrapped_mcp=wrapped_mcp)
            if combined.modifications is None and len(self._combined) < 4096:
                # Immutable throughout (tuples, frozen references) but for the ask and
                # defer details, which each caller gets as its own dict (it may change
                # them): the same fired rules give the same Evaluation (decision 891).
                self._combined[key] = (
                    combined,
                    orjson.dumps(combined.ask_details)
                    if combined.ask_details is not None
                    else None,
                    orjson.dumps(combined.defer_details)
                    if combined.defer_details is not None
                    else None,
                )
            return combined
        shared, ask_text, defer_text = cached
        if ask_text is None and defer_text is None:
            return shared
        if not _EVALUATION_HAS_DICT:
            # Compiled by mypyc: no instance ``__dict__`` to copy (decision 1161).
            return with_details(
                shared,
                orjson.loads(ask_text) if ask_text is not None else None,
                orjson.loads(defer_text) if defer_text is not None else None,
            )
        # A copy of the frozen instance with its own details: no ``__init__`` (one
        # ``object.__setattr__`` per field) and no ``dataclasses.replace``.
        own = object.__new__(Evaluation)
        own.__dict__.update(shared.__dict__)
        if ask_text is not None:
            own.__dict__["ask_details"] = orjson.loads(ask_text)
        if defer_text is not None:
            own.__dict__["defer_details"] = orjson.loads(defer_text)
        return own

    def _combine(
        self, fired: list[Rule], trace: tuple[RuleTrace, ...], *, wrapped_mcp: bool
    ) -> Evaluation:
        b = self.bundle
        refs = tuple(PolicyReference(b.ref.id, b.ref.version, r.id, b.name) for r in fired)
        if not fired:
            # A default allow is named as such (docs/decisions.md 167), as a default deny is.
            codes: tuple[str, ...] = (
                ("no_rule_matched",) if b.default is Effect.DENY else ("default_allow",)
            )
            return Evaluation(
                b.default,
                b.default_reasoning,
                codes,
                (),
                b.ref,
                (),
                default_applied=True,
                trace=trace,
            )
        effect = max((r.effect for r in fired), key=lambda e: e.strength)
        winners = [r for r in fired if r.effect is effect]
        reasoning = "; ".join(_unique([r.spec.reasoning for r in winners if r.spec.reasoning]))
        codes = _unique([c for r in winners for c in r.spec.reason_codes])
        first = winners[0].spec
        return Evaluation(
            effect=effect,
            reasoning=reasoning,
            reason_codes=codes,
            fired=tuple(fired),
            bundle=b.ref,
            references=refs,
            warn=effect is Effect.ALLOW and any(r.spec.warn for r in winners),
            trace=trace,
            ask_details=(
                self._wire_of(first.ask) if effect is Effect.ASK and first.ask is not None else None
            ),
            defer_details=(
                self._wire_of(first.defer)
                if effect is Effect.DEFER and first.defer is not None
                else None
            ),
            modifications=(
                self._merge(winners, wrapped_mcp=wrapped_mcp) if effect is Effect.MODIFY else None
            ),
        )

    def _wire_of(self, spec: Any) -> dict[str, Any]:
        """``spec.to_wire()`` without a pydantic dump per decision: the bundle's specs are
        fixed once loaded, so their wire form is dumped once and each verdict gets a fresh
        copy (callers may change theirs)."""
        text = self._wire_text.get(id(spec))
        if text is None:
            text = orjson.dumps(spec.to_wire())
            self._wire_text[id(spec)] = text
        out: dict[str, Any] = orjson.loads(text)
        return out

    def rule(self, rule_id: str) -> Rule | None:
        """The bundle's rule ``rule_id``, or None."""
        return self._by_id.get(rule_id)

    def modifications_of(
        self, rule_ids: Iterable[str], *, wrapped_mcp: bool
    ) -> dict[str, Any] | None:
        """The merged ``modifications`` (ACS §6, ``modifications.json``) of the modify
        rules among ``rule_ids`` — the rules that fired on a step whose verdict a
        stronger effect won (an ``ask`` granted on the desk still owes them) — or None
        when none of them modifies. Raises :class:`CouldNotDecide` when they cannot be
        merged, as the same rules winning would."""
        if not self._modifying:
            return None
        wanted = set(rule_ids)
        modifying = [r for i, r in self._modifying.items() if i in wanted]
        return self._merge(modifying, wrapped_mcp=wrapped_mcp) if modifying else None

    def _merge(self, rules: list[Rule], *, wrapped_mcp: bool) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for rule in rules:
            assert rule.spec.modify is not None
            mods = self._wire_of(rule.spec.modify)
            if "modified_content" in mods:
                if "modified_content" in merged:
                    raise CouldNotDecide(
                        "two modify rules replace the whole content", reason="evaluation_failed"
                    )
                merged["modified_content"] = mods["modified_content"]
            for name, value in (mods.get("parameter_overrides") or {}).items():
                overrides = merged.setdefault("parameter_overrides", {})
                if name in overrides and overrides[name] != value:
                    raise CouldNotDecide(
                        f"modify rules disagree on argument {name!r}", reason="evaluation_failed"
                    )
                overrides[name] = value
            if mods.get("redactions"):
                merged.setdefault("redactions", []).extend(mods["redactions"])
        try:
            check_modifications(merged, wrapped_mcp=wrapped_mcp)
        except ModificationConflict as exc:
            raise CouldNotDecide(
                f"merged modifications violate §6.3: {exc}", reason="evaluation_failed"
            ) from exc
        return merged
