"""Stage 5's confirmation (decision 975): a gate that defers its effect until every
gate agreed (the ACS grant) writes it only for a step no later gate refused; when the
effect is gone by then, its verdict is final and every other gate gives back what it
took."""

from __future__ import annotations

import dataclasses

from warden.core.guardian import Guardian
from warden.core.pipeline import Pipeline
from warden.core.types import ActionRequest, Effect, Verdict
from warden.policy import PolicyEngine, parse_bundle

REQUEST = ActionRequest(
    method="steps/toolCallRequest",
    payload={},
    metadata={},
    tool={"name": "pay", "version": "", "provider": "", "operation": "", "capability": ""},
    args={},
    raw_command="",
    session={"id": "s", "agent_id": "a", "step_count": 1},
)
ASK = Verdict(decision=Effect.ASK, reasoning="ask a human")
BUNDLE = '{"warden_bundle": 1, "id": "t", "version": "1", "rules": [RULE]}'.replace(
    "RULE", '{"id": "r", "tools": ["*"], "effect": "allow"}'
)
GUARDIAN = Guardian(PolicyEngine(parse_bundle(BUNDLE, source="t")))


class Grant:
    """An approval gate whose grant is read in apply and consumed in confirm."""

    def __init__(self, still_there: bool) -> None:
        self.still_there = still_there
        self.events: list[str] = []
        self._deferred = False

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return verdict.decision is Effect.ASK

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        self._deferred = True
        return dataclasses.replace(verdict, decision=Effect.ALLOW)

    def holding(self) -> bool:
        return False  # nothing consumed before confirm

    def abandon(self, why: str) -> None:
        self.events.append("abandon")

    def confirming(self) -> bool:
        return self._deferred

    def confirm(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        self._deferred = False
        self.events.append("consumed" if self.still_there else "gone")
        return verdict if self.still_there else ASK


class Hold:
    """A spend gate: holds on an allow, or refuses."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.held = False
        self.events: list[str] = []

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return verdict.decision is Effect.ALLOW

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        if self.refuse:
            self.events.append("refused")
            return dataclasses.replace(verdict, decision=Effect.DENY)
        self.held = True
        self.events.append("held")
        return dataclasses.replace(verdict, spend={"held": "1"})

    def holding(self) -> bool:
        return self.held

    def abandon(self, why: str) -> None:
        self.held = False
        self.events.append(f"released: {why}")


def _run(grant: Grant, hold: Hold) -> Verdict:
    # A Guardian that is never consulted (the step is preempted). A real one: compiled by
    # mypyc, Pipeline checks its argument's type.
    pipeline = Pipeline(guardian=GUARDIAN)
    return pipeline.run(None, REQUEST, gates=[grant, hold], preempt=ASK).verdict


def test_a_refused_step_never_consumes_the_grant() -> None:
    grant, hold = Grant(still_there=True), Hold(refuse=True)
    assert _run(grant, hold).decision is Effect.DENY
    assert grant.events == [] and hold.events == ["refused"]


def test_an_allowed_step_consumes_the_grant_after_the_hold() -> None:
    grant, hold = Grant(still_there=True), Hold(refuse=False)
    verdict = _run(grant, hold)
    assert (verdict.decision, verdict.spend) == (Effect.ALLOW, {"held": "1"})
    assert grant.events == ["consumed"] and hold.events == ["held"]


def test_a_grant_gone_by_then_releases_the_hold_and_its_verdict_is_final() -> None:
    grant, hold = Grant(still_there=False), Hold(refuse=False)
    assert _run(grant, hold) is ASK
    assert grant.events == ["gone"]
    assert hold.events == ["held", "released: the grant was no longer there"]
