"""The approval gate: an ``ask`` (or a ``defer`` resolved by a human) meets the desk.

ACS has no wire method that carries an approver's answer back to the Observed
Agent (specs/acs.md §8, upstream issue #175). Warden's rule: the agent resubmits
the same step after approval; the gate finds the grant bound to that exact action
in that session and allows the step once. For a verdict that needs a human the
gate calls :meth:`ApprovalDesk.resolve <warden.approvals.desk.ApprovalDesk.resolve>`
and rewrites the verdict:

- granted → ``allow`` with reason code ``approval_granted``, or ``modify`` when modify
  rules fired beside the ask: the approval grants the ask, and every modification the
  bundle requires still applies (their ``modifications`` merged as if they had won,
  their reason codes added);
- pending → the ``ask``/``defer`` stands, its details naming the task
  (``task_id``, ``task_url``) and the time left;
- denied / expired → ``deny`` (``approval_denied`` / ``approval_expired``);
- a cited task (``params.metadata.approval_task_id``) that is not an unused grant
  for this action → ``deny`` ``grant_invalid``.

``policy_data.approval`` says which task and who approved. A task never stores a value
those modify rules redact (:mod:`warden.approvals.redaction`); its policy records the
``modifications`` that will apply once it is granted. On PostgreSQL a task the step
files commits in the entry's transaction (:attr:`ApprovalStep.folded`, decision 640),
and so does the consumption of a grant the desk can answer without its own
transaction (decision 645): if the entry does not commit, the grant was never
consumed. Otherwise the desk commits in its own transaction before the step's entry,
and if that entry then fails to commit, or the spend gate denies the granted step,
:meth:`ApprovalStep.abandon` gives the grant back.
"""

from __future__ import annotations

import math
from typing import Any

from warden.approvals.binding import action_of
from warden.approvals.desk import (
    ApprovalDesk,
    AskRequest,
    Outcome,
    Resolution,
    with_reasoning,
)
from warden.approvals.redaction import shown_action
from warden.approvals.tasks import Requester, TaskKind
from warden.core.guardian import Guardian, fit_to_hook
from warden.core.types import ActionRequest, Effect, Verdict
from warden.errors import CouldNotDecide, StaleRead, StoreUnavailable
from warden.store.base import FoldedWrite, TaskUnchanged

DEFAULT_GROUP = "approvers"


def needs_human(verdict: Verdict) -> bool:
    """An ``ask``, or a ``defer`` whose resolution method is ``human_approval``."""
    if verdict.decision is Effect.ASK:
        return True
    return (
        verdict.decision is Effect.DEFER
        and (verdict.defer_details or {}).get("resolution_method") == "human_approval"
    )


class ApprovalGate:
    """Connects one Guardian's asks to one desk."""

    def __init__(self, desk: ApprovalDesk, guardian: Guardian, wire: str = "acs") -> None:
        self.desk = desk
        self.guardian = guardian
        self.wire = wire

    def step(self, request_id: str) -> ApprovalStep:
        return ApprovalStep(self, request_id)

    def held_modifications(self, request: ActionRequest, verdict: Verdict) -> dict[str, Any] | None:
        """The merged modifications of the modify rules that fired beside the ask (ACS
        ``modifications.json``), or None. Raises CouldNotDecide when they conflict."""
        return self.guardian.engine.modifications_of(
            (r.rule_id for r in verdict.policy_references),
            wrapped_mcp=request.method.startswith("protocols/MCP/"),
        )

    def ask_for(
        self, request: ActionRequest, verdict: Verdict, held: dict[str, Any] | None = None
    ) -> AskRequest:
        """The desk request for a step whose verdict needs a human; ``held`` are the
        modifications owed once it is granted (their redactions hide values from the
        task)."""
        terms = ask_terms(self.guardian, verdict)
        meta = request.metadata
        user = request.claims.get("user_id") or None
        cited = meta.get("approval_task_id")
        action = action_of(request)
        shown = (
            shown_action(
                action,
                held.get("redactions") or (),
                wrapped_mcp=request.method.startswith("protocols/MCP/"),
            )
            if held
            else None
        )
        policy = policy_of(verdict)
        if held:
            policy["modifications"] = held
        return AskRequest(
            kind=TaskKind.ACTION,
            wire=self.wire,
            scope=str(request.session.get("id", "")),
            action=action,
            shown_action=shown if shown != action else None,
            # The maker is the verified agent and its owner; the user_id the agent
            # claims is recorded as a claim only (issue 15 item 4).
            requester=Requester(
                agent_id=str(request.agent.get("id") or request.session.get("agent_id", "")),
                principal=str(request.agent.get("owner") or "") or None,
                claimed_user_id=str(user) if isinstance(user, str) and user else None,
            ),
            correlation={k: meta[k] for k in ("session_id", "agent_id", "turn_id") if meta.get(k)},
            policy=policy,
            cited_task_id=None if cited is None else _citation(cited),
            **terms,
        )


def _citation(value: Any) -> str:
    """A cited task id as a string; anything malformed cites no task that can match."""
    if isinstance(value, str) and 0 < len(value) <= 64:
        return value
    return "(malformed approval_task_id)"


def ask_terms(guardian: Guardian, verdict: Verdict) -> dict[str, Any]:
    """What the winning rule says about the human it needs: ``approver_group``,
    ``question``, ``timeout_s``, ``timeout_disposition``, ``approvals_required``."""
    spec = _winning_rule(guardian, verdict)
    if verdict.decision is Effect.ASK:
        details = verdict.ask_details or {}
        return {
            "approver_group": str((details.get("approver") or {}).get("id") or DEFAULT_GROUP),
            "question": str(details.get("question") or verdict.reasoning),
            "timeout_s": float(details.get("timeout_seconds") or 900),
            "timeout_disposition": str(details.get("timeout_disposition") or "deny"),
            "approvals_required": spec.ask.approvals_required
            if spec is not None and spec.ask is not None
            else 1,
        }
    details = verdict.defer_details or {}
    defer = spec.defer if spec is not None else None
    return {
        "approver_group": (defer.approver_group if defer is not None else None) or DEFAULT_GROUP,
        "question": verdict.reasoning,
        "timeout_s": float(details.get("resolution_timeout_ms") or 900_000) / 1000,
        "timeout_disposition": "deny",
        "approvals_required": defer.approvals_required if defer is not None else 1,
    }


def policy_of(verdict: Verdict) -> dict[str, Any]:
    """The policy a task records: bundle, rules that fired, reasoning, decision."""
    return {
        "bundle": verdict.bundle.to_wire() if verdict.bundle else None,
        "rules": [r.rule_id for r in verdict.policy_references],
        "reasoning": verdict.reasoning,
        "reason_codes": list(verdict.reason_codes),
        "decision": verdict.decision.value,
    }


def _winning_rule(guardian: Guardian, verdict: Verdict) -> Any:
    """The spec of the first fired rule whose effect is the verdict's."""
    for ref in verdict.policy_references:
        rule = guardian.engine.rule(ref.rule_id)
        if rule is not None and rule.effect is verdict.decision:
            return rule.spec
    return None


class ApprovalStep:
    """The gate's work for one step; its desk answer is kept across commit retries so a
    grant is consumed once however often the entry is staged."""

    def __init__(self, gate: ApprovalGate, request_id: str) -> None:
        self.gate = gate
        self.request_id = request_id
        self.resolution: Resolution | None = None
        self.held: dict[str, Any] | None = None
        #: The desk's pending answer was found stale by the append: read it again.
        self._fresh = False
        #: What the failed append read of the action's newest task (``StaleRead.found``).
        self._found: Any = StaleRead.MISSING
        #: A deferred grant's ask, consumer and the verdict before the desk (decision 975).
        self._deferred: tuple[Any, dict[str, Any], Verdict] | None = None

    @property
    def granted(self) -> bool:
        return self.resolution is not None and self.resolution.outcome is Outcome.GRANTED

    # -- the pipeline's Gate protocol (warden.core.pipeline.Gate) ------------------

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        """An answer already given is re-applied; otherwise only a verdict needing a human."""
        return self.resolution is not None or needs_human(verdict)

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        """The first application asks the desk (store work); a retry reuses its answer."""
        return self.resolution is None

    def holding(self) -> bool:
        """A consumed grant is held until the step that consumed it is recorded (a
        deferred one is not consumed yet: nothing to give back)."""
        res = self.resolution
        return self.granted and res is not None and not res.deferred

    def confirming(self) -> bool:
        """A grant read but not consumed waits for :meth:`confirm` (decision 975)."""
        return self.resolution is not None and self.resolution.deferred

    def confirm(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        """Consume the deferred grant now that every later gate agreed (blocking: the
        desk's transaction). ``verdict`` (the later gates' answer) stands when the grant
        is still there; otherwise the verdict is what the desk answers now (the grant
        was used or decided meanwhile), and the pipeline has the other gates give back
        what they took."""
        assert self._deferred is not None
        ask, consumer, before = self._deferred
        self._deferred = None
        with self.gate.desk.transaction() as tx:
            self.resolution = self.gate.desk.resolve(tx, ask, consumer)
        if self.resolution.outcome is Outcome.GRANTED:
            return verdict
        return fit_to_hook(self._rewrite(before, self.resolution), request.permitted)

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        """The verdict after the desk (blocking: one database transaction)."""
        if self.resolution is None:
            try:
                self.held = self.gate.held_modifications(request, verdict)
            except CouldNotDecide as exc:
                # The modifications a grant would owe cannot be built: fail closed before
                # a task is filed (as the same rules winning would).
                return self.gate.guardian.fail_closed(request, exc.diagnostics())
            if not self._fresh and request.metadata.get("approval_task_id") is None:
                # The common resubmission: the task is pending and remembered; the full
                # desk request (terms, shown action, policy) is built only when needed.
                known = self.gate.desk.remembered(
                    str(request.session.get("id", "")), action_of(request)
                )
                if known is not None:
                    self.resolution = known
                    return fit_to_hook(self._rewrite(verdict, known), request.permitted)
            ask = self.gate.ask_for(request, verdict, self.held)
            consumer = {
                "wire": self.gate.wire,
                "session_id": ask.scope,
                "request_id": self.request_id,
            }
            try:
                peeked = self.gate.desk.peek(
                    ask,
                    fresh=self._fresh,
                    consumer=consumer,
                    newest=self._found,
                    defer_grant=True,
                )
            except StoreUnavailable:
                peeked = None  # the write transaction below reconnects or fails closed
            if peeked is not None:
                # Still pending, or a grant consumed with the entry or after the later
                # gates (deferred): answered from a read, no write transaction.
                self.resolution = peeked
                if peeked.deferred:
                    self._deferred = (ask, consumer, verdict)
            else:
                with self.gate.desk.transaction() as tx:
                    self.resolution = self.gate.desk.resolve(tx, ask, consumer)
        return fit_to_hook(self._rewrite(verdict, self.resolution), request.permitted)

    @property
    def folded(self) -> FoldedWrite | None:
        """The task this step files in its append's transaction (PostgreSQL), or None."""
        res = self.resolution
        return res.folded if res is not None else None

    @property
    def guards(self) -> tuple[TaskUnchanged, ...]:
        """What the step's append must find unchanged: the pending task this answer was
        read from outside a write transaction (none for an answer from one)."""
        res = self.resolution
        return (res.guard,) if res is not None and res.guard is not None else ()

    def forget(self, stale: StaleRead | None = None) -> None:
        """The append found the pending task changed (``StaleRead``): the next
        application asks the desk again, from the database, or from what that append
        read of the action's newest task in the same round trip (``stale.found``,
        decision 820)."""
        self.resolution = None
        self.held = None
        self._deferred = None
        self._fresh = True
        self._found = stale.found if stale is not None else StaleRead.MISSING

    def abandon(self, why: str = "the step could not be recorded") -> None:
        """Give a consumed grant back (the step it allowed was not recorded or allowed).
        A grant consumed with the step's entry (:attr:`folded`) was not consumed unless
        that entry committed: it is only forgotten, the task stays approved."""
        res = self.resolution
        if res is None or res.outcome is not Outcome.GRANTED or res.task is None:
            return
        if res.folded is not None or res.deferred:
            self.resolution = None
            self._deferred = None
            return
        consumer = {
            "wire": self.gate.wire,
            "session_id": res.task.scope,
            "request_id": self.request_id,
        }
        self.gate.desk.release(res.task.id, consumer, why)
        self.resolution = None

    def _rewrite(self, verdict: Verdict, res: Resolution) -> Verdict:
        task = res.task
        info: dict[str, Any] = {"outcome": res.outcome.value}
        if task is not None:
            info.update(
                task_id=task.id,
                state=task.state.value,
                approver_group=task.approver_group,
                approvals=[
                    {"principal": v.principal, "at": v.at, "reason": v.reason}
                    for v in task.approvals()
                ],
                approvals_required=task.approvals_required,
                action_hash=task.action_hash,
                expires_at=task.expires_at.isoformat(),
            )
            url = self.gate.desk.task_url(task.id)
            if url is not None:
                info["task_url"] = url
        policy_data = {**verdict.policy_data, "approval": info}
        codes = tuple(dict.fromkeys((*verdict.reason_codes, res.reason_code)))
        if res.outcome is Outcome.PENDING and task is not None:
            left = max(1, math.ceil((task.expires_at - self.gate.desk.now()).total_seconds()))
            extra = {
                "task_id": task.id,
                **({"task_url": info["task_url"]} if "task_url" in info else {}),
            }
            if verdict.decision is Effect.ASK:
                ask = {**(verdict.ask_details or {}), **extra, "timeout_seconds": left}
                return verdict.but(
                    ask_details=ask,
                    reasoning=with_reasoning(verdict.reasoning, res.text),
                    reason_codes=codes,
                    policy_data=policy_data,
                )
            defer = {**(verdict.defer_details or {}), **extra, "resolution_timeout_ms": left * 1000}
            return verdict.but(
                defer_details=defer,
                reasoning=with_reasoning(verdict.reasoning, res.text),
                reason_codes=codes,
                policy_data=policy_data,
            )
        if res.outcome is Outcome.GRANTED and self.held is not None:
            # The approval grants the ask; the bundle's modifications still apply.
            modifying = self._modify_rules(verdict)
            more = [c for r in modifying for c in r.spec.reason_codes]
            why = [r.spec.reasoning for r in modifying if r.spec.reasoning]
            return Verdict(
                decision=Effect.MODIFY,
                reasoning=" ".join(dict.fromkeys([res.text, *why])),
                reason_codes=tuple(dict.fromkeys((*codes, *more))),
                policy_references=verdict.policy_references,
                bundle=verdict.bundle,
                modifications=self.held,
                policy_data=policy_data,
            )
        decision = Effect.ALLOW if res.outcome is Outcome.GRANTED else Effect.DENY
        return Verdict(
            decision=decision,
            reasoning=res.text
            if decision is Effect.ALLOW
            else with_reasoning(verdict.reasoning, res.text),
            reason_codes=codes,
            policy_references=verdict.policy_references,
            bundle=verdict.bundle,
            policy_data=policy_data,
        )

    def _modify_rules(self, verdict: Verdict) -> list[Any]:
        """The fired modify rules of ``verdict``, in bundle order."""
        fired = {r.rule_id for r in verdict.policy_references}
        return [
            r
            for r in self.gate.guardian.engine.bundle.rules
            if r.id in fired and r.effect is Effect.MODIFY
        ]
