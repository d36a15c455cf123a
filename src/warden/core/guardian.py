"""The Guardian: one decision path for every wire (DESIGN.md "One decision, four wires").

``Guardian.decide(request)`` runs the policy engine, then makes the verdict fit the
hook (the spend gate, which holds money and so has effects, runs on this verdict in
the wire's dispatch: :mod:`warden.gates.spend`): an effect the hook does
not permit becomes deny (or allow where deny is not permitted either) with
reason code ``disposition_not_permitted`` (specs/acs.md §7). It never raises
for a request: any engine failure is a fail-closed deny with reason code
``evaluation_failed`` whose ``failure`` detail goes to the ledger.
"""

from __future__ import annotations

import logging
import traceback

from warden.core.observe import DecisionObservers
from warden.core.types import ActionRequest, BundleRef, Effect, Verdict
from warden.errors import CouldNotDecide
from warden.policy.engine import Evaluation, PolicyEngine

log = logging.getLogger(__name__)

FAIL_CLOSED_REASONING = "Warden could not evaluate this step, so it is denied (fail closed)."


class Guardian:
    """Decides steps against one policy engine. Thread-safe."""

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine
        #: Told each wire's final verdict (the metrics; see warden.core.observe).
        self.observers = DecisionObservers({r.id: r.effect.value for r in engine.bundle.rules})

    @property
    def bundle_ref(self) -> BundleRef:
        return self.engine.bundle.ref

    def decide(self, request: ActionRequest) -> Verdict:
        """Return the verdict for ``request``; never raises for request content."""
        try:
            ev = self.engine.evaluate(request)
        except CouldNotDecide as exc:
            log.warning("fail-closed deny: %s", exc.diagnostics())
            return self.fail_closed(request, exc.diagnostics())
        except Exception:  # noqa: BLE001 - the outermost fail-closed layer
            detail = traceback.format_exc()
            log.error("fail-closed deny after engine crash:\n%s", detail)
            return self.fail_closed(request, detail)
        verdict = verdict_from_evaluation(ev)
        if request.provenance is not None:
            # The provenance gates (FIDES, IBAC, AARM, CaMeL) only tighten the verdict.
            from warden.provenance.gates import apply_gates

            try:
                verdict = apply_gates(request.provenance, verdict, ev.bundle)
            except Exception:  # noqa: BLE001 - a gate that cannot decide fails closed
                detail = traceback.format_exc()
                log.error("fail-closed deny after provenance gate crash:\n%s", detail)
                return self.fail_closed(request, detail)
        return fit_to_hook(verdict, request.permitted)

    def fail_closed(self, request: ActionRequest, detail: str) -> Verdict:
        """The signed-deny verdict used when no decision could be reached."""
        verdict = Verdict(
            decision=Effect.DENY,
            reasoning=FAIL_CLOSED_REASONING,
            reason_codes=("evaluation_failed",),
            bundle=self.engine.bundle.ref,
            failure=detail,
        )
        return fit_to_hook(verdict, request.permitted)


def verdict_from_evaluation(ev: Evaluation) -> Verdict:
    """The verdict of an engine result. A bundle default cites no rule, so its verdict
    names the bundle in ``policy_data.bundle`` (``{id, version, digest}``) instead."""
    return Verdict(
        decision=ev.effect,
        reasoning=ev.reasoning,
        reason_codes=ev.reason_codes,
        policy_references=ev.references,
        bundle=ev.bundle,
        warn=ev.warn,
        modifications=ev.modifications,
        ask_details=ev.ask_details,
        defer_details=ev.defer_details,
        policy_data={"bundle": ev.bundle.to_wire()} if ev.default_applied else {},
    )


def fit_to_hook(verdict: Verdict, permitted: frozenset[Effect]) -> Verdict:
    """Substitute a disposition the hook does not permit (deny if permitted, else allow)."""
    if verdict.decision in permitted:
        return verdict
    replacement = Effect.DENY if Effect.DENY in permitted else Effect.ALLOW
    codes = tuple(dict.fromkeys((*verdict.reason_codes, "disposition_not_permitted")))
    reasoning = (
        f"{verdict.reasoning} (policy said {verdict.decision.value}, which this hook does not "
        f"permit; answered {replacement.value})"
    ).strip()
    return Verdict(
        decision=replacement,
        reasoning=reasoning,
        reason_codes=codes,
        policy_references=verdict.policy_references,
        bundle=verdict.bundle,
        policy_data={**verdict.policy_data, "substituted_from": verdict.decision.value},
        failure=verdict.failure,
        cited_provenance_ids=verdict.cited_provenance_ids,
    )
