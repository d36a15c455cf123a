"""Run policy test cases through the real decision path (docs/policy-testing.md).

Each case's request is built as the wire builds it and decided by
:class:`~warden.core.pipeline.Pipeline` over a :class:`~warden.core.guardian.Guardian`
of the bundle under test: the same stages ``warden serve`` runs (the verified caller
becomes CEL ``agent``, the provenance intake attaches the step's view computed by
:func:`~warden.provenance.facts.view_for` from the session's history, then
:meth:`Guardian.decide <warden.core.guardian.Guardian.decide>`, which fails closed and
applies the provenance gates and the hook's permitted dispositions). An ACS request is
first checked as the server checks it (:mod:`warden.wire.acs.offline`); one the server
would reject has the JSON-RPC error as its outcome.

Not run: the approval desk and the spend gate, whose answers depend on state policy
does not compute (a human's answer, a budget's balance). The outcome is the verdict
policy gives; an ``ask`` is reported with the approver group the desk would ask.
Nothing is written anywhere.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from warden.core.guardian import Guardian
from warden.core.hooks import WARDEN_METHODS
from warden.core.pipeline import Pipeline
from warden.core.types import (
    ActionRequest,
    Effect,
    Principal,
    Verdict,
    agent_facts,
    user_id_claim,
)
from warden.errors import ConfigError, InvalidParams, ProtocolError
from warden.policy import Bundle, PolicyEngine
from warden.policytools.cases import AgentSpec, Case, Step, TestFile
from warden.provenance.facts import view_for
from warden.provenance.graph import SessionProvenance
from warden.store.base import SessionState
from warden.wire.acs.offline import NotEvaluated, checked_message
from warden.wire.acs.parse import action_request
from warden.wire.acs.render import verdict_result

ACS_VERSION = "0.1.0"
#: Fixed so that a case decides the same every run (a rule may read the timestamp).
TIMESTAMP = "2026-01-01T00:00:00Z"
_NS = uuid.UUID("6f1d8f0e-4b7a-4f43-9a53-2f1e5f0c19a1")
#: (provider, capability) of the tool each Warden wire puts in its request
#: (warden.spend.asks.quote_request, warden.kla.asks.action_request, warden.adcp.checks).
_WIRE_TOOL = {
    "spend/quote": ("spend", "spend"),
    "kla/action": ("kla", "kla"),
    "adcp/check_governance": ("adcp", "governance"),
}


@dataclass(frozen=True)
class Outcome:
    """What the decision path answered for a case: a verdict's decision, rules that
    fired, reason codes, modifications, approver group and warn flag, or the JSON-RPC
    ``error`` (``{name, code, message}``) the server would answer instead."""

    decision: str | None = None
    rules: tuple[str, ...] = ()
    reason_codes: tuple[str, ...] = ()
    modifications: dict[str, Any] | None = None
    approver_group: str | None = None
    warn: bool = False
    reasoning: str = ""
    error: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "rules": list(self.rules),
            "reason_codes": list(self.reason_codes),
            "modifications": self.modifications,
            "approver_group": self.approver_group,
            "warn": self.warn,
            "reasoning": self.reasoning,
            "error": self.error,
        }


@dataclass(frozen=True)
class CaseResult:
    """One case: where it came from, whether it passed, each mismatch, the outcome."""

    file: str
    name: str
    failures: tuple[str, ...]
    outcome: Outcome
    seconds: float

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class RunReport:
    """Every case's result and the coverage of the bundle's rules (``fired``: how many
    cases fired each rule, in bundle order)."""

    bundle: Bundle
    files: list[str]
    results: list[CaseResult] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def unfired(self) -> list[str]:
        """Rules no case fired, in bundle order."""
        return [rid for rid, n in self.fired.items() if n == 0]


class _History:
    """Provenance intake for a test case: the state its history left (the service's
    ``_ProvenanceIntake`` reads the same state from the chain)."""

    def __init__(self, prior: SessionProvenance, spec: Any, params: dict[str, Any]) -> None:
        self.prior = prior
        self.spec = spec
        self.params = params

    def attach(self, request: ActionRequest) -> ActionRequest:
        return replace(
            request,
            provenance=view_for(
                self.prior, self.spec, request.method, self.params, request.args, request.tool
            ),
        )


def _rejection(exc: ProtocolError) -> Outcome:
    return Outcome(
        error={"name": exc.code.name.lower(), "code": int(exc.code), "message": exc.message}
    )


#: The provenance gates a verdict can cite as ``builtin:<gate>`` (provenance/gates.py).
BUILTIN_GATES = ("fides", "ibac", "aarm", "camel", "sinks", "intent")


class PolicyTester:
    """Decides test cases against one bundle. Stateless between cases."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.guardian = Guardian(PolicyEngine(bundle))
        self.pipeline = Pipeline(self.guardian)

    # -- requests ------------------------------------------------------------------

    def _params(self, step: Step, request_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        return {
            "acs_version": ACS_VERSION,
            "request_id": request_id,
            "timestamp": TIMESTAMP,
            "metadata": {**metadata, **(step.metadata or {})},
            "payload": payload_of(step),
        }

    def _decide(
        self,
        step: Step,
        *,
        request_id: str,
        metadata: dict[str, Any],
        principal: Principal | None,
        session: SessionState,
        prior: SessionProvenance,
        where: str,
        wire_session: str = "",
    ) -> tuple[Verdict | Outcome, dict[str, Any] | None]:
        """The verdict of one step (or the rejection the server would answer) and the
        ACS params it was sent with (None for a Warden method, whose session id is
        ``wire_session``: a KLA request's execution id)."""
        method = step.method
        if method in WARDEN_METHODS:
            request = _wire_request(step, principal, wire_session)
            return self.pipeline.run(principal, request).verdict, None
        params = self._params(step, request_id, metadata)
        msg = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            info, params = checked_message(msg)
        except NotEvaluated as exc:
            raise ConfigError(
                f"{where}: {exc.method} is answered by the protocol layer; policy does not see it",
                reason="tests_invalid",
            ) from exc
        except ProtocolError as exc:
            return _rejection(exc), params
        request = action_request(
            info,
            params,
            session,
            agent=principal.agent if principal is not None else None,
            claims={"user_id": user_id_claim(params["metadata"])},
        )
        spec = self.bundle.provenance
        intake = None
        if spec is not None:
            taken = prior.check(info.method, params, spec)
            if taken.problem is not None:
                # The service refuses such a step with -32602 and records nothing.
                refusal = InvalidParams(
                    f"{info.method} provenance refused: {taken.problem[1]}",
                    pointer=taken.problem[0],
                    method=info.method,
                )
                return _rejection(refusal), params
            intake = _History(prior, spec, params)
        return self.pipeline.run(principal, request, intake=intake).verdict, params

    # -- cases ---------------------------------------------------------------------

    def outcome(self, tests: TestFile, case: Case) -> Outcome:
        """The outcome of ``case``: its history decided and recorded in order, then the
        case's own request. Raises :class:`ConfigError` for a history step the server
        would reject (the case cannot be set up) or a handshake/ping request."""
        agent = case.agent or tests.defaults.agent
        principal = _principal(agent)
        sess = case.session
        history = sess.history if sess is not None else []
        session_id = (sess.id if sess is not None and sess.id else None) or str(
            uuid.uuid5(_NS, f"{tests.source}\n{case.name}")
        )
        agent_id = (sess.agent_id if sess is not None else None) or (
            agent.id if agent is not None else "test-agent"
        )
        metadata = {**(tests.defaults.metadata or {}), "agent_id": agent_id}
        metadata["session_id"] = session_id
        where = f"{tests.source}: case {case.name!r}"
        prior = SessionProvenance()
        for i, step in enumerate(history):
            rid = str(uuid.uuid5(_NS, f"{session_id}\n{i}"))
            state = _session(session_id, agent_id, i)
            got, params = self._decide(
                step,
                request_id=rid,
                metadata=metadata,
                principal=principal,
                session=state,
                prior=prior,
                where=f"{where}: history step #{i + 1}",
            )
            if isinstance(got, Outcome):
                assert got.error is not None
                raise ConfigError(
                    f"{where}: history step #{i + 1} would be rejected by the server "
                    f"({got.error['name']}): {got.error['message']}",
                    reason="tests_invalid",
                )
            decision = step.decision or got.decision
            if params is not None:
                prior = prior.applied(step.method, params, decision.value, got.intent_extension)
        count = sess.step_count if sess is not None and sess.step_count is not None else None
        got, _ = self._decide(
            case,
            request_id=str(uuid.uuid5(_NS, f"{session_id}\n{len(history)}")),
            metadata=metadata,
            principal=principal,
            session=_session(session_id, agent_id, count if count is not None else len(history)),
            prior=prior,
            where=where,
            wire_session=(sess.id if sess is not None else None) or "",
        )
        if isinstance(got, Outcome):
            return got
        return self._outcome(got, acs=case.method not in WARDEN_METHODS)

    def _outcome(self, verdict: Verdict, *, acs: bool) -> Outcome:
        """The outcome of a verdict; on ACS as the wire renders it (wire/acs/render.py:
        e.g. a ``warn`` allow carries reason code ``policy_warning``)."""
        group = None
        if verdict.decision in (Effect.ASK, Effect.DEFER):
            from warden.gates.approval import ask_terms

            group = str(ask_terms(self.guardian, verdict)["approver_group"])
        codes, reasoning = verdict.reason_codes, verdict.reasoning
        if acs:
            shown = verdict_result(
                verdict, acs_version=ACS_VERSION, request_id="", chain_hash=None, duration_ms=0
            )
            codes = tuple(shown.get("reason_codes", ()))
            reasoning = str(shown.get("reasoning", ""))
        return Outcome(
            decision=verdict.decision.value,
            rules=tuple(r.rule_id for r in verdict.policy_references),
            reason_codes=codes,
            modifications=verdict.modifications,
            approver_group=group,
            warn=verdict.warn,
            reasoning=reasoning,
        )

    def run_case(self, tests: TestFile, case: Case) -> CaseResult:
        """Decide ``case`` and compare the outcome with its expectation."""
        t0 = time.perf_counter()
        got = self.outcome(tests, case)
        return CaseResult(
            tests.source, case.name, tuple(mismatches(case, got)), got, time.perf_counter() - t0
        )

    def problems(self, tests: TestFile) -> list[str]:
        """What makes ``tests`` unfit for this bundle, one line each
        (``file: case 'name': field: reason``): a file written for another bundle (its
        ``bundle`` id), and ``expect.rules`` naming a rule the bundle does not have (nor
        a built-in gate, ``builtin:<gate>``) — such a case could never pass."""
        out: list[str] = []
        if tests.bundle is not None and tests.bundle != self.bundle.ref.id:
            out.append(
                f"{tests.source}: file: bundle: the cases are for bundle {tests.bundle!r}, "
                f"not {self.bundle.ref.id!r}"
            )
        known = {r.id for r in self.bundle.rules} | {f"builtin:{g}" for g in BUILTIN_GATES}
        for case in tests.cases:
            unknown = [r for r in dict.fromkeys(case.expect.rules or ()) if r not in known]
            if unknown:
                out.append(
                    f"{tests.source}: case {case.name!r}: expect.rules: "
                    f"{', '.join(map(repr, unknown))} "
                    f"{'is not a rule' if len(unknown) == 1 else 'are not rules'} of bundle "
                    f"{self.bundle.ref.id!r} (nor a built-in gate: "
                    f"{', '.join(f'builtin:{g}' for g in BUILTIN_GATES)})"
                )
        return out

    def run(self, files: Iterable[TestFile]) -> RunReport:
        """Every case of ``files`` in order, with rule coverage. Raises ConfigError
        listing every :meth:`problems` line of every file (a file written for another
        bundle, an expected rule the bundle does not have)."""
        files = list(files)
        problems = [p for tf in files for p in self.problems(tf)]
        if problems:
            raise ConfigError("\n".join(problems), reason="tests_invalid")
        report = RunReport(self.bundle, [tf.source for tf in files])
        report.fired = {r.id: 0 for r in self.bundle.rules}
        for tf in files:
            for case in tf.cases:
                result = self.run_case(tf, case)
                report.results.append(result)
                for rid in dict.fromkeys(result.outcome.rules):
                    if rid in report.fired:  # not the built-in gates (builtin:camel …)
                        report.fired[rid] += 1
        return report


def _principal(agent: AgentSpec | None) -> Principal | None:
    """A registered agent as the pipeline's verified caller; None leaves the request's
    unverified ``agent`` (a caller authenticated by the shared IKM only)."""
    if agent is None:
        return None
    return Principal(
        "agent", agent.id, "test", agent_facts(agent.id, agent.owner, agent.groups, agent.budgets)
    )


def _session(session_id: str, agent_id: str, steps_before: int) -> SessionState:
    return SessionState(session_id, agent_id, "test", TIMESTAMP, head_seq=steps_before - 1)


def payload_of(step: Step) -> dict[str, Any]:
    """The ACS payload of a step (the shorthand expanded as a client would send it)."""
    if step.payload is not None:
        return step.payload
    assert step.tool is not None
    if step.method == "steps/toolCallResult":
        output: dict[str, Any] = {"value": step.result}
        if step.result_id is not None:
            output["provenance"] = {
                "provenance_id": step.result_id,
                "origin": "tool_output",
                "source_id": step.tool,
            }
        return {"tool": {"name": step.tool}, "exit_status": "success", "outputs": [output]}
    args = step.args or {}
    if step.method == "protocols/MCP/tools/call":
        return {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": step.tool, "arguments": args},
        }
    arguments: dict[str, Any] = {}
    for name, value in args.items():
        arguments[name] = {"value": value}
        label = (step.provenance or {}).get(name)
        if label is not None:
            prov = label.model_dump(exclude_none=True)
            prov.setdefault("provenance_id", f"test:{name}")
            arguments[name]["provenance"] = prov
    return {"tool": {"name": step.tool}, "arguments": arguments}


def _wire_request(step: Step, principal: Principal | None, session_id: str = "") -> ActionRequest:
    """The request a Warden wire (spend quote, KLA action request, AdCP governance
    check) gives the Guardian: its tool named by the action, its policy ``args``, the
    session ``session_id`` (a KLA request's ``correlation.execution_id``; else "")."""
    assert step.tool is not None
    provider, capability = _WIRE_TOOL[step.method]
    who = principal.id if principal is not None else ""
    return ActionRequest(
        method=step.method,
        payload=dict(step.args or {}),
        metadata={"principal": who, **(step.metadata or {})},
        tool={
            "name": step.tool,
            "version": "",
            "provider": provider,
            "operation": "",
            "capability": capability,
        },
        args=dict(step.args or {}),
        raw_command="",
        session={"id": session_id, "agent_id": who, "step_count": 0},
    )


def mismatches(case: Case, got: Outcome) -> list[str]:
    """Each way ``got`` differs from ``case.expect`` (empty: the case passes)."""
    want = case.expect
    out: list[str] = []
    if want.error is not None:
        if got.error is None:
            out.append(f"expected the server to reject it ({want.error}), got {got.decision}")
        elif got.error["name"] != want.error:
            out.append(f"error: expected {want.error}, got {got.error['name']}")
        return out
    if got.error is not None:
        return [
            f"the server would reject this request ({got.error['name']}): {got.error['message']}"
        ]
    assert want.decision is not None
    if got.decision != want.decision.value:
        out.append(
            f"decision: expected {want.decision.value}, got {got.decision}"
            + (f" (rules: {', '.join(got.rules)})" if got.rules else " (no rule fired)")
        )
    if want.rules is not None and sorted(set(want.rules)) != sorted(set(got.rules)):
        out.append(f"rules: expected {sorted(set(want.rules))}, got {sorted(set(got.rules))}")
    if want.reason_codes is not None and sorted(set(want.reason_codes)) != sorted(
        set(got.reason_codes)
    ):
        out.append(
            f"reason_codes: expected {sorted(set(want.reason_codes))}, "
            f"got {sorted(set(got.reason_codes))}"
        )
    if "modifications" in want.model_fields_set and want.modifications != got.modifications:
        out.append(f"modifications: expected {want.modifications}, got {got.modifications}")
    if want.approver_group is not None and want.approver_group != got.approver_group:
        out.append(f"approver_group: expected {want.approver_group}, got {got.approver_group}")
    if want.warn is not None and want.warn != got.warn:
        out.append(f"warn: expected {want.warn}, got {got.warn}")
    return out
