"""Decision observers: how a wire reports a final verdict to the metrics and traces.

Each wire calls :meth:`DecisionObservers.decided` once per decision, where its
verdict is final for that wire (after the approval and spend gates and the audit
commit on ACS; after the Guardian on the spend, KLA and AdCP wires). Observers
must be cheap and must not raise: the call sits on the decision path. The tracer
(:class:`DecisionTracer`, :mod:`warden.core.tracing`) is optional: without one a
decision costs one attribute test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from warden.core.types import Verdict

if TYPE_CHECKING:
    from warden.core.pipeline import Decided

log = logging.getLogger(__name__)

#: The wire label: ``acs`` (ACS hooks), ``mcp`` (wrapped MCP steps on the ACS wire and
#: the MCP proxy), ``spend``, ``kla``, ``adcp``.
Wire = Literal["acs", "mcp", "spend", "kla", "adcp"]

#: ``(wire, decision, rule, seconds)``: decision is the verdict's effect
#: (``allow``/``deny``/``modify``/``ask``/``defer``), rule is :func:`rule_label`,
#: seconds the wall time from the request's arrival at the decision to its final verdict.
DecisionObserver = Callable[[Wire, str, str, float], None]


class TraceParent(NamedTuple):
    """A W3C Trace Context parent a request carried in its own body (KLA's
    ``correlation.trace_id``/``span_id``): 32 and 16 lowercase hex digits."""

    trace_id: str
    span_id: str


class DecisionTracer(Protocol):
    """Turns a final decision into a span (:class:`warden.core.tracing.SpanTracer`).
    Never raises and never changes the decision."""

    def decided(
        self,
        wire: Wire,
        decided: Decided,
        verdict: Verdict,
        *,
        audit: Mapping[str, str | int] | None = None,
        parent: TraceParent | None = None,
    ) -> None: ...

    def decided_raw(
        self,
        wire: Wire,
        verdict: Mapping[str, Any],
        started: float,
        *,
        decided: Decided | None = None,
        audit: Mapping[str, str | int] | None = None,
    ) -> None: ...


def rule_label(
    rule_ids: list[str], reason_codes: list[str], winners: set[str] | None = None
) -> str:
    """The first fired rule in ``winners`` (the rules whose effect is the decision: a
    fired allow rule is not why a step was denied), else the first fired rule, else the
    first reason code (a default or a fail-closed deny), else ``none``. Rule ids come from
    the bundle and reason codes from the bundle or Warden's fixed set, so the label's
    cardinality is bounded (never an agent or session id)."""
    if winners:
        for rid in rule_ids:
            if rid in winners:
                return rid
    if rule_ids:
        return rule_ids[0]
    if reason_codes:
        return reason_codes[0]
    return "none"


class ShadowHook(Protocol):
    """Takes a final decision's request for shadow evaluation after its answer is
    committed (:class:`warden.whatif.shadow.ShadowWorker`). Must not block or raise."""

    def submit(self, wire: str, request: Any) -> None: ...


class DecisionObservers:
    """The observers of one Guardian; thread-safe to call (observers are set at start-up).

    ``effects`` maps the bundle's rule ids to their effect (``allow``, ``deny``, …), to
    name the rule whose effect won."""

    def __init__(self, effects: dict[str, str] | None = None) -> None:
        self._observers: list[DecisionObserver] = []
        self._effects = effects or {}
        #: Set at start-up when traces are exported (``otlp_endpoint``); None: no spans.
        self.tracer: DecisionTracer | None = None
        #: Set at start-up with ``shadow_policy`` (issue 19); None: no shadow evaluation.
        self.shadow: ShadowHook | None = None

    def set_effects(self, effects: dict[str, str]) -> None:
        """The rule effects of a newly activated bundle (``warden policy activate``)."""
        self._effects = effects

    def add(self, observer: DecisionObserver) -> None:
        self._observers.append(observer)

    def decided(self, wire: Wire, verdict: Verdict, started: float) -> None:
        """Report ``verdict`` on ``wire``; ``started`` is a :func:`time.perf_counter` value."""
        self.decided_raw(
            wire,
            verdict.decision.value,
            [r.rule_id for r in verdict.policy_references],
            list(verdict.reason_codes),
            started,
        )

    def decided_raw(
        self,
        wire: Wire,
        decision: str,
        rule_ids: list[str],
        reason_codes: list[str],
        started: float,
    ) -> None:
        """Report a decision already rendered (an audit entry's ``verdict`` object)."""
        if not self._observers:
            return
        winners = {rid for rid in rule_ids if self._effects.get(rid) == decision}
        rule = rule_label(rule_ids, reason_codes, winners)
        seconds = max(0.0, time.perf_counter() - started)
        for observer in self._observers:
            try:
                observer(wire, decision, rule, seconds)
            except Exception:  # noqa: BLE001 - metrics never change a decision
                log.warning("decision observer failed", exc_info=True)
