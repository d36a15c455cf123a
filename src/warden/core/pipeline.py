"""The one decision pipeline every wire calls (issue 16; docs/architecture.md).

A wire parses the caller's bytes and authenticates the caller; then, for every wire
(ACS hooks, wrapped MCP, the MCP proxy through ACS, spend quotes, KLA action requests
and AdCP ``check_governance``), :class:`Pipeline` runs the same stages in the same order:

1. **principal** — the caller as Warden verified it (:class:`Principal`) becomes the
   request's CEL ``agent``; what the caller only claims stays in ``claims``;
2. **request** — the wire's :class:`~warden.core.types.ActionRequest`;
3. **intake** — the provenance view of the step (:class:`Intake`), when the bundle has one;
4. **decide** — :meth:`Guardian.decide <warden.core.guardian.Guardian.decide>` (or a
   verdict the wire pre-empted with, e.g. ACS ``chain_mismatch``);
5. **gates** — each :class:`Gate` in order (approval, then spend); then, unless the
   verdict is a deny, what a gate deferred until every gate agreed is written
   (:class:`Confirming`: the ACS grant consumed after the spend hold, decision 975);
   when the final verdict is a deny, every gate is told to give back what it took
   (:meth:`Gate.abandon`);
6. **record** — the wire's audit sink writes the entry and the gates' state changes in
   its transaction (ACS: the staged ContextEntry through group commit; the Warden-chain
   wires: the operation's own transaction, which their gates are bound to, so a task
   or a hold commits with its entry or not at all — :class:`Recording`);
7. **verdict** — after the record is durable the wire calls :meth:`Pipeline.finished`
   (or hands it to the transaction with :meth:`Pipeline.finished_after`), the one place
   a final verdict is reported to the observers (metrics, traces).

:meth:`Pipeline.decide` is a generator so that one code path serves a thread and an
event loop: it yields an :class:`Offload` for blocking store work (a gate that holds
money or files a task) and receives its value; :meth:`Pipeline.run` is the driver for
callers already on a worker thread. The core imports nothing above ``policy/``: gates
and intakes are protocols that the layers above implement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from warden.core.guardian import Guardian
from warden.core.observe import TraceParent, Wire
from warden.core.types import ActionRequest, Effect, Principal, Verdict


@dataclass(frozen=True)
class Offload:
    """Blocking store work the driver must run (off the event loop when it has one);
    the driver sends back ``run()``'s value or throws its exception in."""

    run: Callable[[], Any]


class Gate(Protocol):
    """An effect that follows a verdict (stage 5): the approval desk, a spend hold.

    ``wants`` says whether the gate acts on this verdict at all; ``blocking`` whether
    :meth:`apply` may touch the store (the driver then offloads it); ``apply`` returns
    the verdict after the gate (tightened, or rewritten by a human's answer);
    ``holding`` whether it took something it would give back; ``abandon`` gives that
    back when the step ends denied or its record does not commit (idempotent, blocking,
    never raises).
    """

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool: ...

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool: ...

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict: ...

    def holding(self) -> bool: ...

    def abandon(self, why: str) -> None: ...


class Confirming(Protocol):
    """A gate that decides in :meth:`Gate.apply` but writes its effect only once every
    gate after it agreed (:meth:`confirm`, blocking), so a refusal by a later gate
    never takes it: the ACS approval gate consumes a grant only for a step the spend
    gate did not refuse (decision 975). ``confirm`` returns ``verdict`` when the effect
    was written, else the verdict without it."""

    def confirming(self) -> bool: ...
    def confirm(self, request: ActionRequest, verdict: Verdict) -> Verdict: ...


class Recording(Protocol):
    """The one write transaction a Warden-chain wire records a step in (the spend
    wire, KLA, AdCP): its gates' state changes and its audit entry commit together, and
    what must wait for that commit is handed to :meth:`after_commit`."""

    def after_commit(self, report: Callable[[], None]) -> None: ...


class Intake(Protocol):
    """Provenance intake (stage 3): the request with its provenance view attached."""

    def attach(self, request: ActionRequest) -> ActionRequest: ...


#: A decision in progress: yields blocking work, returns the :class:`Decided`.
DecisionFlow = Generator[Offload, Any, "Decided"]


@dataclass(frozen=True)
class Decided:
    """The outcome of stages 1–5: the request as decided and its verdict, ready to be
    recorded. ``started`` is the :func:`time.perf_counter` value at the request's
    arrival; ``stages`` the seconds each stage took (``intake``, ``decide``, ``gates``),
    one after the other; ``ended`` the :func:`time.perf_counter` value when the gates
    ended (0.0: unknown), so the record stage is what lies between it and :meth:`finished
    <Pipeline.finished>`."""

    request: ActionRequest
    verdict: Verdict
    started: float
    stages: dict[str, float]
    ended: float = 0.0


class Pipeline:
    """Runs the decision stages for one Guardian. Thread-safe (holds no per-step state)."""

    def __init__(self, guardian: Guardian) -> None:
        self.guardian = guardian

    def decide(
        self,
        principal: Principal | None,
        request: ActionRequest,
        *,
        intake: Intake | None = None,
        gates: Sequence[Gate] = (),
        preempt: Verdict | None = None,
        started: float | None = None,
    ) -> DecisionFlow:
        """Stages 1–5 as a generator (see the module doc). ``preempt`` replaces the
        Guardian's verdict (the gates still run on it). Never raises for request content:
        the Guardian fails closed; an exception from a gate propagates after every gate
        has been told to abandon (the wire answers its fail-closed error)."""
        t0 = time.perf_counter() if started is None else started
        if principal is not None and request.agent is not principal.agent:
            request = replace(request, agent=principal.agent)
        stages: dict[str, float] = {}
        mark = time.perf_counter()
        if intake is not None:
            request = yield Offload(lambda: intake.attach(request))
            now = time.perf_counter()
            stages["intake"], mark = now - mark, now
        verdict = preempt if preempt is not None else self.guardian.decide(request)
        now = time.perf_counter()
        stages["decide"], mark = now - mark, now
        try:
            for gate in gates:
                if not gate.wants(request, verdict):
                    continue
                if gate.blocking(request, verdict):
                    verdict = yield Offload(_applier(gate, request, verdict))
                else:
                    verdict = gate.apply(request, verdict)
            if verdict.decision is not Effect.DENY:
                # Stage 5's confirmation (decision 975): what a gate deferred until every
                # gate agreed is written now. A gate whose effect is gone by then answers
                # another verdict, which is final: every gate gives back what it took.
                # Inline, with an attribute look-up (not isinstance on the protocol):
                # this runs on every decision that is not a deny.
                for gate in gates:
                    confirming = getattr(gate, "confirming", None)
                    if confirming is None or not confirming():
                        continue
                    confirmed: Verdict = yield Offload(_confirmer(gate, request, verdict))
                    if confirmed is not verdict:
                        yield from abandon(gates, "the grant was no longer there")
                        verdict = confirmed
                        break
        except BaseException:
            yield from abandon(gates, "the step could not be decided")
            raise
        if verdict.decision is Effect.DENY:
            # A later gate refused what an earlier one granted: give the grant back.
            yield from abandon(gates, "the granted step was denied")
        ended = time.perf_counter()
        stages["gates"] = ended - mark
        return Decided(request, verdict, t0, stages, ended)

    def run(
        self,
        principal: Principal | None,
        request: ActionRequest,
        *,
        intake: Intake | None = None,
        gates: Sequence[Gate] = (),
        preempt: Verdict | None = None,
    ) -> Decided:
        """:meth:`decide` driven on the calling thread (its blocking work runs inline)."""
        decided: Decided = drive(
            self.decide(principal, request, intake=intake, gates=gates, preempt=preempt)
        )
        return decided

    def fail_closed(self, decided: Decided, gates: Sequence[Gate], detail: str) -> DecisionFlow:
        """A fail-closed deny for a decided step that cannot be answered as decided (its
        rendered response failed its schema): every gate gives back what it took."""
        verdict = self.guardian.fail_closed(decided.request, detail)
        yield from abandon(gates, "the step could not be answered as decided")
        return replace(decided, verdict=verdict)

    def finished(
        self,
        wire: Wire,
        decided: Decided,
        *,
        audit: Mapping[str, str | int] | None = None,
        parent: TraceParent | None = None,
    ) -> None:
        """Stage 7: report a final, durably recorded verdict to the observers (metrics,
        and the tracer when one is configured). Call once per decision, after its record
        committed. ``audit`` names the record (e.g. ``entry_hash``) on the decision's span;
        ``parent`` is a trace parent the request itself carried (else the current
        OpenTelemetry context: the HTTP ``traceparent``)."""
        observers = self.guardian.observers
        observers.decided(wire, decided.verdict, decided.started)
        if observers.tracer is not None:
            observers.tracer.decided(wire, decided, decided.verdict, audit=audit, parent=parent)
        if observers.shadow is not None:
            # Shadow mode (issue 19): a queue put; the candidate runs on its own thread.
            observers.shadow.submit(wire, decided.request)

    def finished_after(
        self,
        tx: Recording,
        wire: Wire,
        decided: Decided,
        *,
        audit: Mapping[str, str | int] | None = None,
        parent: TraceParent | None = None,
    ) -> None:
        """:meth:`finished` once ``tx`` has committed (never if it rolls back): the
        Warden-chain wires decide, run their gates and write their entry in one
        transaction, and report the verdict only when that is durable."""
        tx.after_commit(lambda: self.finished(wire, decided, audit=audit, parent=parent))

    def finished_raw(
        self,
        wire: Wire,
        verdict: dict[str, Any],
        started: float,
        *,
        decided: Decided | None = None,
        audit: Mapping[str, str | int] | None = None,
    ) -> None:
        """:meth:`finished` for a verdict known only as rendered (an entry's ``verdict``
        object, or a signed deny that writes no entry); ``decided`` is the pipeline's
        outcome when the step went through it (its request and stage timings go on the
        span; the rendered verdict is the one reported)."""
        refs = verdict.get("policy_references") or []
        observers = self.guardian.observers
        observers.decided_raw(
            wire,
            str(verdict.get("decision", "deny")),
            [r["rule_id"] for r in refs],
            list(verdict.get("reason_codes") or []),
            started,
        )
        if observers.tracer is not None:
            observers.tracer.decided_raw(wire, verdict, started, decided=decided, audit=audit)
        if observers.shadow is not None and decided is not None:
            observers.shadow.submit(wire, decided.request)


def abandon(gates: Sequence[Gate], why: str) -> Generator[Offload, Any, None]:
    """Tell every gate to give back what it took (each ``abandon`` is idempotent)."""
    for gate in gates:
        if gate.holding():
            yield Offload(_abandoner(gate, why))


def _confirmer(gate: Gate, request: ActionRequest, verdict: Verdict) -> Callable[[], Verdict]:
    return lambda: cast(Confirming, gate).confirm(request, verdict)


def drive(flow: Generator[Offload, Any, Any]) -> Any:
    """Run a flow of :class:`Offload` items on the calling thread; return its value."""
    try:
        item = next(flow)
        while True:
            try:
                value = item.run()
            except Exception as exc:  # noqa: BLE001 - the flow decides what it means
                item = flow.throw(exc)
            else:
                item = flow.send(value)
    except StopIteration as done:
        return done.value


def _applier(gate: Gate, request: ActionRequest, verdict: Verdict) -> Callable[[], Verdict]:
    return lambda: gate.apply(request, verdict)


def _abandoner(gate: Gate, why: str) -> Callable[[], None]:
    return lambda: gate.abandon(why)
