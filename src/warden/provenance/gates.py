"""FIDES, IBAC, AARM and CaMeL as built-in gates (specs/acs.md §9; issue 8).

Each gate reads a :class:`~warden.provenance.facts.ProvenanceView` and returns a
:class:`Finding` or None; :func:`apply_gates` folds the findings into the policy
verdict. A gate only tightens: the stronger of the policy's decision and the gates'
wins, and every finding adds its reason codes, a ``policy_references`` entry
(``rule_id`` ``builtin:<paradigm>``), ``cited_provenance_ids`` and
``policy_data.<paradigm>``. Reason codes:

- ``fides_p_t_violation`` (+ ``untrusted_into_consequential``): a consequential call
  takes an argument whose integrity is untrusted.
- ``fides_p_f_violation``: an external sink takes data from a confidential source.
- ``ibac_intent_mismatch`` (+ ``ibac_scope_mode_strict`` under a strict intent): the
  call's capability is outside the session's parsed intent.
- ``aarm_argument_taint``: an argument of a consequential call derives from untrusted
  content that entered the session (AARM ``taint: arguments``, the default).
- ``aarm_cumulative_taint``: untrusted content entered the session before a
  consequential call (AARM ``taint: session``, the strict opt-in).
- ``untrusted_destination``: a destination argument (the bundle's ``sinks``: a URL, a
  recipient, an account, a channel) derives from untrusted content, on any tool.
- ``camel_dependency_graph_violation`` (+ ``untrusted_into_consequential``): a protected
  argument's dependency graph reaches untrusted data.
- ``intent_mismatch``: a step tried to set the intent outside its window (only the
  first sessionStart or first agentTrigger, before any other step), to change the fixed
  intent, or to set a parsed intent without ``user_input`` ``parser_provenance`` (always
  on when the bundle has a ``provenance`` section).

``policy_data.provenance`` (:func:`notes`) says how the step's provenance was read: the
mode, arguments sent without provenance, arguments of unknown trust and how the bundle
treats them, inferred arguments, and labels Warden overrode; it is present on any
verdict where one of those applies, not only when a gate fired.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from warden.core.types import BundleRef, Effect, PolicyReference, Verdict
from warden.provenance.facts import ArgLabel, ProvenanceView
from warden.provenance.model import Node, Trust

_CITE_LIMIT = 32
#: Lineage nodes listed per argument in ``policy_data`` (the rest are counted).
_LINEAGE_LIMIT = 64


@dataclass(frozen=True)
class Finding:
    """What one gate found: the effect it asks for and why."""

    paradigm: str
    effect: Effect
    reason_codes: tuple[str, ...]
    reasoning: str
    cited: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)


def _effect(action: str) -> Effect:
    return Effect(action)


def _describe(view: ProvenanceView, label: ArgLabel) -> str:
    """Which data made an argument risky, in words."""
    if label.inferred and label.lineage:
        node = view.state.nodes.get(label.lineage[0])
        where = (
            f"the output of {node.source_id or 'a tool'} at step {node.step_id}" if node else "?"
        )
        return f"its value {label.matched[:60]!r} was copied from {where} (inferred)"
    untrusted = [
        view.state.nodes[p]
        for p in label.lineage
        if p in view.state.nodes
        and view.state.trust(p, view.spec) is Trust.UNTRUSTED
        and view.state.nodes[p].origin != "agent_generated"
    ]
    if not untrusted:
        if label.trust is Trust.UNKNOWN:
            why = (
                "it was sent without provenance"
                if not label.sent
                else "its lineage reaches no content Warden recorded (only agent_generated "
                "nodes, a cycle, or unknown ids)"
            )
            return f"{why}; unknown trust counts as {view.spec.unknown_trust} in this bundle"
        return f"its trust is {label.trust.value}"
    n = untrusted[0]
    src = f" of {n.source_id}" if n.source_id else ""
    return f"it derives from {n.origin}{src} at step {n.step_id} (provenance {n.provenance_id})"


def _lineage(view: ProvenanceView, label: ArgLabel) -> list[dict[str, Any]]:
    """The argument's lineage for ``policy_data`` (the first :data:`_LINEAGE_LIMIT`
    nodes; a last item ``{"omitted": n}`` counts the rest)."""
    out: list[dict[str, Any]] = []
    for p in label.lineage[:_LINEAGE_LIMIT]:
        node = view.state.nodes.get(p)
        item: dict[str, Any] = node.to_json() if node else {"provenance_id": p, "origin": "unknown"}
        item["trust"] = view.state.trust(p, view.spec).value
        out.append(item)
    if len(label.lineage) > _LINEAGE_LIMIT:
        out.append({"omitted": len(label.lineage) - _LINEAGE_LIMIT})
    return out


def _path(view: ProvenanceView, name: str) -> str:
    name = name.replace("~", "~0").replace("/", "~1")
    if view.method == "protocols/MCP/tools/call":
        return f"/params/arguments/{name}"
    return f"/arguments/{name}"


def fides(view: ProvenanceView) -> list[Finding]:
    spec = view.spec.gates.fides
    found: list[Finding] = []
    if spec.p_t != "off" and view.consequential:
        bad = [
            a for a in view.args.values() if view.spec.guards(view.tool, a.name) and view.risky(a)
        ]
        if bad:
            found.append(
                Finding(
                    "fides",
                    _effect(spec.p_t),
                    ("fides_p_t_violation", "untrusted_into_consequential"),
                    f"FIDES P-T: consequential call {view.tool} takes argument(s) of untrusted "
                    "integrity: " + "; ".join(f"`{a.name}`: {_describe(view, a)}" for a in bad),
                    tuple(p for a in bad for p in a.lineage),
                    {
                        "p_t": {
                            "violations": [
                                {
                                    "argument_path": _path(view, a.name),
                                    "trust": a.trust.value,
                                    "inferred": a.inferred,
                                    "lineage": _lineage(view, a),
                                }
                                for a in bad
                            ]
                        }
                    },
                )
            )
    if spec.p_f != "off" and view.external_sink and _destination_in_doubt(view):
        leaks = []
        for a in view.args.values():
            conf = [
                view.state.nodes[p]
                for p in a.lineage
                if p in view.state.nodes
                and view.spec.is_confidential_source(view.state.nodes[p].source_id)
            ]
            if conf:
                leaks.append((a, conf))
        if leaks:
            found.append(
                Finding(
                    "fides",
                    _effect(spec.p_f),
                    ("fides_p_f_violation",),
                    f"FIDES P-F: external sink {view.tool} would receive confidential data: "
                    + "; ".join(
                        f"`{a.name}` derives from {c[0].source_id} at step {c[0].step_id}"
                        for a, c in leaks
                    ),
                    tuple(p for a, _ in leaks for p in a.lineage),
                    {
                        "p_f": {
                            "violations": [
                                {
                                    "argument_path": _path(view, a.name),
                                    "confidential_sources": sorted({n.source_id for n in c}),
                                    "lineage": _lineage(view, a),
                                }
                                for a, c in leaks
                            ]
                        }
                    },
                )
            )
    return found


def _destination_in_doubt(view: ProvenanceView) -> bool:
    """Whether P-F looks at this external sink: always, unless the bundle's
    ``argument_scope`` is ``sinks`` and every declared destination argument of the call
    is trusted (the user chose where the data goes, so sending it there is the task)."""
    if view.spec.argument_scope != "sinks":
        return True
    names = [n for n in view.spec.sink_arguments(view.tool) if n in view.args]
    return not names or any(view.risky(view.args[n]) for n in names)


def ibac(view: ProvenanceView) -> list[Finding]:
    spec = view.spec.gates.ibac
    if view.method not in ("steps/toolCallRequest", "protocols/MCP/tools/call"):
        return []
    if spec.scope == "consequential" and not view.consequential:
        return []
    covers = view.intent_covers()
    if covers is True or (covers is None and not spec.require_intent):
        return []
    intent = view.state.intent
    strict = intent is not None and intent.scope_mode == "strict"
    codes: tuple[str, ...] = ("ibac_intent_mismatch",)
    effect = _effect(spec.on_mismatch)
    if strict:
        codes += ("ibac_scope_mode_strict",)
        effect = Effect.DENY
    closest = view.closest_intent()
    why = (
        "the session declared no intent"
        if intent is None
        else f"the intent fixed at step {intent.step_id} allows "
        + (", ".join(str(c.to_json()) for c in intent.capabilities) or "nothing")
    )
    cited: tuple[str, ...] = ()
    if intent is not None and isinstance(intent.parser_provenance, dict):
        pid = intent.parser_provenance.get("provenance_id")
        cited = (pid,) if isinstance(pid, str) else ()
    return [
        Finding(
            "ibac",
            effect,
            codes,
            f"IBAC: capability {view.requested.to_json()} is outside the session's intent "
            f"({why})" + (" and the intent's scope is strict" if strict else ""),
            cited,
            {
                "requested_capability": view.requested.to_json(),
                "closest_match_in_intent": closest,
                "intent_step_id": intent.step_id if intent else None,
                "scope_mode": intent.scope_mode if intent else None,
            },
        )
    ]


def aarm(view: ProvenanceView) -> list[Finding]:
    spec = view.spec.gates.aarm
    if not view.consequential:
        return []
    entered = view.entered()
    if spec.lookback_steps:
        entered = [n for n in entered if view.step_index - n.step_index <= spec.lookback_steps]
    if not entered:
        return []
    if spec.taint == "session":
        return [_aarm_session(view, entered)]
    # Precise taint (issue 20): only the untrusted content the call's arguments derive from.
    by_id = {n.provenance_id: n for n in entered}
    tainted: list[tuple[ArgLabel, list[Node]]] = []
    for a in view.args.values():
        if not view.spec.guards(view.tool, a.name):
            continue
        hit = [by_id[p] for p in a.lineage if p in by_id]
        if hit:
            tainted.append((a, hit))
    if not tainted:
        return []
    first = min((n for _, hit in tainted for n in hit), key=lambda n: n.step_index)
    sources = sorted({n.source_id for _, hit in tainted for n in hit if n.source_id})
    return [
        Finding(
            "aarm",
            _effect(spec.on_taint),
            ("aarm_argument_taint",),
            f"AARM: consequential call {view.tool} takes argument(s) derived from untrusted "
            "content: " + "; ".join(f"`{a.name}`: {_describe(view, a)}" for a, _ in tainted),
            tuple(dict.fromkeys(n.provenance_id for _, hit in tainted for n in hit)),
            {
                "taint": "arguments",
                "earliest_untrusted_step_id": first.step_id,
                "lookback_distance": view.step_index - first.step_index,
                "lookback_steps": spec.lookback_steps,
                "tainted_arguments": [
                    {
                        "argument_path": _path(view, a.name),
                        "untrusted": [_cite(n) for n in hit[:_LINEAGE_LIMIT]],
                    }
                    for a, hit in tainted
                ],
                "untrusted_sources": sources,
            },
        )
    ]


def _cite(node: Node) -> dict[str, Any]:
    """The untrusted content a decision rests on: which source, step and provenance id."""
    out: dict[str, Any] = {
        "provenance_id": node.provenance_id,
        "origin": node.origin,
        "step_id": node.step_id,
    }
    if node.source_id:
        out["source_id"] = node.source_id
    return out


def _aarm_session(view: ProvenanceView, entered: list[Node]) -> Finding:
    """Session-wide (cumulative) taint: the strict, opt-in AARM (``taint: session``)."""
    spec = view.spec.gates.aarm
    first = entered[0]
    sources = sorted({n.source_id for n in entered if n.source_id})
    return Finding(
        "aarm",
        _effect(spec.on_taint),
        ("aarm_cumulative_taint",),
        f"AARM: untrusted content entered this session before consequential call "
        f"{view.tool}, first at step {first.step_id} ({first.origin}"
        + (f" of {first.source_id}" if first.source_id else "")
        + f", {view.step_index - first.step_index} steps ago)"
        + (f"; sources: {', '.join(sources)}" if sources else ""),
        tuple(n.provenance_id for n in entered),
        {
            "taint": "session",
            "earliest_untrusted_step_id": first.step_id,
            "lookback_distance": view.step_index - first.step_index,
            "lookback_steps": spec.lookback_steps,
            "untrusted_step_ids": list(dict.fromkeys(n.step_id for n in entered)),
            "untrusted_sources": sources,
        },
    )


def sinks(view: ProvenanceView) -> list[Finding]:
    """The destination rule (issue 20): a declared sink argument of untrusted integrity,
    on any tool call (reads included), is at least ``on_untrusted``."""
    if view.method not in ("steps/toolCallRequest", "protocols/MCP/tools/call"):
        return []
    names = view.spec.sink_arguments(view.tool)
    if not names:
        return []
    bad = [view.args[n] for n in names if n in view.args and view.risky(view.args[n])]
    if not bad:
        return []
    violations = []
    for a in bad:
        untrusted = [
            view.state.nodes[p]
            for p in a.lineage
            if p in view.state.nodes
            and view.state.trust(p, view.spec) is Trust.UNTRUSTED
            and view.state.nodes[p].origin != "agent_generated"
        ]
        violations.append(
            {
                "argument_path": _path(view, a.name),
                "trust": a.trust.value,
                "inferred": a.inferred,
                "sources": [_cite(n) for n in untrusted[:_LINEAGE_LIMIT]],
                **({"matched": a.matched[:200]} if a.inferred and a.matched else {}),
            }
        )
    return [
        Finding(
            "sinks",
            _effect(view.spec.gates.sinks.on_untrusted),
            ("untrusted_destination",),
            f"Sink: {view.tool} would send data to or fetch from a destination taken from "
            "untrusted content: " + "; ".join(f"`{a.name}`: {_describe(view, a)}" for a in bad),
            tuple(p for a in bad for p in a.lineage),
            {"violations": violations},
        )
    ]


def camel(view: ProvenanceView) -> list[Finding]:
    spec = view.spec.gates.camel
    if not view.consequential:
        return []
    graph: dict[str, Any] = {}
    bad: list[ArgLabel] = []
    for a in view.args.values():
        nodes = _lineage(view, a)
        edges = [
            [p, d]
            for p in a.lineage[:_LINEAGE_LIMIT]
            if p in view.state.nodes
            for d in view.state.nodes[p].derived_from
        ]
        protected = spec.protected(view.tool, a.name)
        graph[a.name] = {
            "trust": a.trust.value,
            "protected": protected,
            "nodes": nodes,
            "edges": edges,
            "inferred": a.inferred,
        }
        if protected and view.risky(a):
            bad.append(a)
    if not bad:
        return []
    return [
        Finding(
            "camel",
            _effect(spec.on_violation),
            ("camel_dependency_graph_violation", "untrusted_into_consequential"),
            f"CaMeL: protected argument(s) of {view.tool} depend on untrusted data: "
            + "; ".join(f"`{a.name}`: {_describe(view, a)}" for a in bad),
            tuple(p for a in bad for p in a.lineage),
            {"dependency_graph": graph, "violations": [_path(view, a.name) for a in bad]},
        )
    ]


GATES = {"fides": fides, "ibac": ibac, "aarm": aarm, "camel": camel, "sinks": sinks}


def findings(view: ProvenanceView) -> list[Finding]:
    """Every finding of the enabled gates (and the intent-immutability check)."""
    out: list[Finding] = []
    if view.intent_problem is not None:
        out.append(
            Finding("intent", Effect.DENY, ("intent_mismatch",), view.intent_problem, (), {})
        )
    gates = view.spec.gates
    for name, gate in GATES.items():
        if getattr(gates, name).enabled:
            out.extend(gate(view))
    return out


def notes(view: ProvenanceView, fired: bool = False) -> dict[str, Any] | None:
    """``policy_data.provenance`` for the step, or None when there is nothing to say
    (no gate fired, every argument had provenance of known trust, nothing overridden)."""
    out: dict[str, Any] = {"mode": view.mode}
    inferred = sorted(n for n, a in view.args.items() if a.inferred and a.lineage)
    if inferred:
        out["inferred_arguments"] = inferred
    absent = sorted(n for n, a in view.args.items() if not a.sent and not a.lineage)
    if absent:
        out["absent_arguments"] = absent
    unknown = sorted(n for n, a in view.args.items() if a.trust is Trust.UNKNOWN)
    if unknown:
        out["unknown_arguments"] = unknown
        out["unknown_treated_as"] = view.spec.unknown_trust
    if view.overrides:
        out["overridden"] = [o.to_json() for o in view.overrides[:_CITE_LIMIT]]
    if len(out) == 1 and not fired:
        return None
    return out


def apply_gates(view: ProvenanceView, verdict: Verdict, bundle: BundleRef | None) -> Verdict:
    """``verdict`` tightened by the gates' findings (see module docstring)."""
    found = findings(view)
    if not found:
        said = notes(view)
        if said is None:
            return verdict
        return replace(verdict, policy_data={**verdict.policy_data, "provenance": said})
    strongest = max((f.effect for f in found), key=lambda e: e.strength)
    tighter = strongest.strength > verdict.decision.strength
    decision = strongest if tighter else verdict.decision
    texts = [f.reasoning for f in found]
    reasoning = "; ".join(texts) if tighter else "; ".join([verdict.reasoning, *texts]).strip("; ")
    codes = tuple(
        dict.fromkeys((*verdict.reason_codes, *(c for f in found for c in f.reason_codes)))
    )
    refs = list(verdict.policy_references)
    if bundle is not None:
        for paradigm in dict.fromkeys(f.paradigm for f in found):
            refs.append(
                PolicyReference(bundle.id, bundle.version, f"builtin:{paradigm}", "provenance")
            )
    data = dict(verdict.policy_data)
    for f in found:
        if f.paradigm == "fides":
            data.setdefault("fides", {}).update(f.data)
        elif f.data:
            data[f.paradigm] = f.data
    data["provenance"] = notes(view, fired=True)
    cited = tuple(
        dict.fromkeys((*verdict.cited_provenance_ids, *(p for f in found for p in f.cited)))
    )
    ask_details = verdict.ask_details
    defer_details = verdict.defer_details
    if tighter and decision is Effect.ASK:
        target = view.spec.ask
        ask_details = {
            "question": f"Allow {view.tool or view.method} although: {texts[0]}?",
            "approver": target.approver.model_dump(),
            "timeout_seconds": target.timeout_seconds,
            "timeout_disposition": target.timeout_disposition,
        }
    if tighter and decision is Effect.DEFER:
        target = view.spec.ask
        defer_details = {
            "reason": "insufficient_context",
            "resolution_method": "human_approval",
            "resolution_timeout_ms": target.timeout_seconds * 1000,
            "timeout_decision": "deny",
        }
    return replace(
        verdict,
        decision=decision,
        reasoning=reasoning,
        reason_codes=codes,
        policy_references=tuple(refs),
        policy_data=data,
        cited_provenance_ids=cited[:_CITE_LIMIT] if len(cited) > _CITE_LIMIT else cited,
        ask_details=ask_details if decision is Effect.ASK else None,
        defer_details=defer_details if decision is Effect.DEFER else None,
        modifications=verdict.modifications if decision is Effect.MODIFY else None,
        warn=verdict.warn and decision is Effect.ALLOW,
    )
