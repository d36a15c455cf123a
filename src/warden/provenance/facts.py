"""The per-step provenance view: what CEL rules (variable ``provenance``) and the gates see.

Built by :func:`view_for` from the session's state before the step and the step's own
payload. Per argument: its derived trust, origins, source ids and lineage (client
provenance), or — in inference mode, for an argument without provenance — an inferred
label. Both sides are normalised (:func:`~.graph.normalise`: NFKC, case-folded,
whitespace and format characters such as zero-width spaces removed), and each argument
leaf is also tried decoded (percent-encoding, base64, hex of values of at least 8 bytes)
and in canonical URL / e-mail form (:mod:`.forms`). The label is

- ``untrusted`` (lineage: that output) when one form of a text leaf (at least
  ``inference_min_length`` characters) appears in an earlier untrusted tool output of
  the session and in no user message, or the leaf, found whole in neither the user's
  words nor a trusted output, contains a token of such an output (whitespace-separated,
  at least :data:`~.graph.TOKEN_MIN` characters) that no user message contains;
- ``trusted`` when every text leaf is found in the user's own messages (the user typed
  it) or in a trusted output (lineage: that output);
- otherwise the argument is ``unknown``: the bundle's ``unknown_trust`` (default
  ``untrusted``) says how the gates treat it.

What inference cannot see is listed in docs/provenance.md ("What inference cannot see").
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from warden.provenance.config import ProvenanceSpec
from warden.provenance.forms import canonical, raw_forms
from warden.provenance.graph import (
    INTENT_STEPS,
    OutputText,
    Override,
    SessionProvenance,
    intake,
    leaves,
    normalise,
)
from warden.provenance.model import Capability, Node, Trust

TOOL_CALL_METHODS = frozenset({"steps/toolCallRequest", "protocols/MCP/tools/call"})


@dataclass(frozen=True)
class ArgLabel:
    """One argument's label: trust, lineage (provenance ids, the argument's own first),
    and whether Warden inferred it (no client provenance)."""

    name: str
    trust: Trust
    lineage: tuple[str, ...]
    inferred: bool = False
    matched: str = ""  # inference: the text leaf found in a tool output
    sent: bool = True  # the client sent provenance for it

    def facts(self, state: SessionProvenance, spec: ProvenanceSpec) -> dict[str, Any]:
        nodes = [state.nodes[p] for p in self.lineage if p in state.nodes]
        return {
            "trust": self.trust.value,
            "origins": sorted({n.origin for n in nodes}),
            "source_ids": sorted({n.source_id for n in nodes if n.source_id}),
            "lineage": list(self.lineage),
            "inferred": self.inferred,
            "confidential": any(spec.is_confidential_source(n.source_id) for n in nodes),
        }


@dataclass(frozen=True)
class ProvenanceView:
    """The provenance facts of one step (see module docstring)."""

    spec: ProvenanceSpec
    state: SessionProvenance  # the session's state with this step's own nodes added
    method: str
    step_index: int
    tool: str
    requested: Capability
    args: dict[str, ArgLabel] = field(default_factory=dict)
    mode: str = "client"
    intent_problem: str | None = None
    overrides: tuple[Override, ...] = ()

    @property
    def consequential(self) -> bool:
        return self.method in TOOL_CALL_METHODS and self.spec.is_consequential(self.tool)

    @property
    def external_sink(self) -> bool:
        return self.method in TOOL_CALL_METHODS and self.spec.is_external_sink(self.tool)

    def risky(self, label: ArgLabel) -> bool:
        """Whether the gates treat ``label`` as untrusted (``unknown`` per the bundle)."""
        if label.trust is Trust.UNTRUSTED:
            return True
        return label.trust is Trust.UNKNOWN and self.spec.unknown_trust == "untrusted"

    def entered(self) -> list[Node]:
        return [n for n in self.state.entered(self.spec) if n.step_index < self.step_index]

    def intent_covers(self) -> bool | None:
        intent = self.state.intent
        if intent is None:
            return None
        return any(c.covers(self.requested) for c in intent.capabilities)

    def closest_intent(self) -> dict[str, str] | None:
        intent = self.state.intent
        if intent is None or not intent.capabilities:
            return None
        best = max(
            intent.capabilities,
            key=lambda c: difflib.SequenceMatcher(None, c.tool, self.requested.tool).ratio(),
        )
        return best.to_json()

    def facts(self) -> dict[str, Any]:
        """The CEL variable ``provenance`` (docs/provenance.md)."""
        entered = self.entered()
        intent = self.state.intent
        covers = self.intent_covers()
        return {
            "mode": self.mode,
            "args": {n: a.facts(self.state, self.spec) for n, a in self.args.items()},
            "untrusted_args": sorted(n for n, a in self.args.items() if self.risky(a)),
            "tool": {
                "consequential": self.consequential,
                "external_sink": self.external_sink,
                "sinks": list(self.spec.sink_arguments(self.tool))
                if self.method in TOOL_CALL_METHODS
                else [],
            },
            "session": {
                "untrusted_entered": bool(entered),
                "untrusted_step_ids": list(dict.fromkeys(n.step_id for n in entered)),
                "untrusted_sources": sorted({n.source_id for n in entered if n.source_id}),
                "earliest_untrusted_step_id": entered[0].step_id if entered else "",
                "steps_since_untrusted": self.step_index - entered[0].step_index if entered else -1,
                "summary": self.state.summary(),
            },
            "intent": {
                "present": intent is not None,
                "raw": intent.raw if intent else "",
                "parsed": [c.to_json() for c in intent.capabilities] if intent else [],
                "scope_mode": intent.scope_mode if intent else "",
                "within": bool(covers) if covers is not None else False,
            },
        }


def _infer(
    state: SessionProvenance, spec: ProvenanceSpec, name: str, value: Any
) -> ArgLabel | None:
    """The inferred label of an argument sent without provenance (module docstring):
    untrusted when copied from an untrusted tool output, trusted when every text leaf is
    in the user's words (or copied from a trusted output), None (unknown) otherwise."""
    untrusted: list[OutputText] = []
    trusted: list[OutputText] = []
    for o in state.outputs:
        (untrusted if state.trust(o.provenance_id, spec) is Trust.UNTRUSTED else trusted).append(o)
    users = state.user_texts
    user_canon = [canonical(u) for u in users] if users else []
    least = spec.inference_min_length
    all_known = True
    source: OutputText | None = None
    matched_any = ""
    for leaf in leaves(value):
        found_user = False
        found_trusted: OutputText | None = None
        for raw in raw_forms(leaf):
            norm = normalise(raw)
            if len(norm) < least:
                continue
            canon = canonical(norm)
            if any(norm in u for u in users) or any(canon in u for u in user_canon):
                found_user = True
                break
            for out in untrusted:
                if out.contains(norm, canon):
                    return ArgLabel(name, Trust.UNTRUSTED, (out.provenance_id,), True, raw, False)
            if found_trusted is None:
                found_trusted = next((o for o in trusted if o.contains(norm, canon)), None)
        if not found_user and found_trusted is None:
            # A token of an untrusted output inside a longer value (a URL in a message);
            # not when the whole value was found in the user's words or a trusted output
            # (that is where it came from: a hotel's address that a review also names).
            norm = normalise(leaf)
            canon = canonical(norm)
            for out in untrusted:
                hits = [t for t in out.tokens if t in norm]
                hits += [t for t, c in out.canon_tokens if c in canon]
                for tok in hits:
                    if not any(tok in u for u in users):
                        return ArgLabel(
                            name, Trust.UNTRUSTED, (out.provenance_id,), True, tok, False
                        )
        if found_user:
            matched_any = matched_any or leaf
        elif found_trusted is not None:
            source = source or found_trusted
            matched_any = matched_any or leaf
        else:
            all_known = False
    if all_known and matched_any:
        lineage = (source.provenance_id,) if source is not None else ()
        return ArgLabel(name, Trust.TRUSTED, lineage, True, matched_any, False)
    return None


def view_for(
    prior: SessionProvenance,
    spec: ProvenanceSpec,
    method: str,
    params: dict[str, Any],
    args: dict[str, Any],
    tool: dict[str, str],
) -> ProvenanceView:
    """The view of one step: ``prior`` is the state after the session's last committed
    step; ``args`` the unwrapped argument values (native or wrapped MCP)."""
    payload = params.get("payload") or {}
    taken = intake(prior, method, params)
    state = (
        prior.applied(method, params, "allow", _taken=taken)
        if method == "steps/toolCallRequest"
        else prior
    )
    labels: dict[str, ArgLabel] = {}
    mode = "client"
    if method in TOOL_CALL_METHODS:
        sent = payload.get("arguments") if method == "steps/toolCallRequest" else None
        for name, value in args.items():
            arg = sent.get(name) if isinstance(sent, dict) else None
            prov = arg.get("provenance") if isinstance(arg, dict) else None
            if isinstance(prov, dict) and isinstance(prov.get("provenance_id"), str):
                pid = prov["provenance_id"]
                labels[name] = ArgLabel(name, state.trust(pid, spec), tuple(state.lineage(pid)))
                continue
            inferred = _infer(prior, spec, name, value) if spec.inference else None
            if inferred is not None:
                mode = "inferred"
                labels[name] = inferred
            else:
                labels[name] = ArgLabel(name, Trust.UNKNOWN, (), spec.inference, sent=False)
                if spec.inference:
                    mode = "inferred"
                elif mode == "client":
                    mode = "none"
    problem: str | None = None
    declared = payload.get("intent") if method in INTENT_STEPS else None
    if isinstance(declared, dict):
        fixed = prior.intent
        if fixed is not None and not fixed.same_declaration(declared):
            problem = (
                f"The session's intent was fixed at step {fixed.step_id}; a later step cannot "
                "change it (only an approved intent_extension can)."
            )
        elif fixed is None and not prior.may_set_intent(method):
            problem = (
                "Intent can be set only by the session's first sessionStart or first "
                "agentTrigger, before any other step; this step comes later."
            )
        elif fixed is None and declared.get("parsed"):
            pp = declared.get("parser_provenance")
            if not isinstance(pp, dict) or pp.get("origin") != "user_input":
                problem = (
                    "A parsed intent must carry parser_provenance with origin user_input "
                    "(ACS §8.4); this one does not."
                )
    requested = Capability(
        tool.get("name", ""), tool.get("operation", ""), tool.get("capability", "")
    )
    return ProvenanceView(
        spec=spec,
        state=state,
        method=method,
        step_index=prior.step_count,
        tool=tool.get("name", ""),
        requested=requested,
        args=labels,
        mode=mode,
        intent_problem=problem,
        overrides=taken.overrides,
    )
