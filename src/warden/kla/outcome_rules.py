"""When an agent's outcome report may be recorded (seed 004: decision → audit).

The control rule of the outcome path (docs/decisions.md, items 80 and 87): a tool call
may follow ``allow``, never ``block``, and follows ``require_approval`` only with an
approval it consumes then (:func:`authorize`: an approval authorizes one step only); an
outcome without a tool call must agree with the record (:func:`consistent`). A report
that breaks the rule is :class:`OutcomeRefused`; the wire renders it as ``409
record:not_authorized`` (:mod:`warden.wire.kla.outcome`).
"""

from __future__ import annotations

from typing import Any

from warden.approvals.desk import Outcome
from warden.approvals.tasks import ApprovalState
from warden.errors import WardenError
from warden.identity.api_keys import Identity
from warden.kla.asks import WIRE, desk_ask
from warden.kla.recorder import KlaTx, Recorder
from warden.kla.records import KlaDecision
from warden.kla.trail import Trail
from warden.store.kla_sql import KlaRow


class OutcomeRefused(WardenError):
    """The outcome contradicts the record or names a tool call the decision did not
    allow. ``task_id`` names the desk task still deciding, when a human approval is the
    way forward."""

    reason = "not_authorized"

    def __init__(self, message: str, *, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


def authorize(
    rec: Recorder,
    tx: KlaTx,
    trail: Trail,
    decision: dict[str, Any],
    standing: tuple[KlaRow, dict[str, Any]] | None,
    who: Identity,
    scope: str,
) -> None:
    """The control rule: no tool effect after block, nor after require_approval
    without an approval (consumed now: an approval authorizes one step only). ``scope``:
    the desk scope the request's task was filed in (its execution's placement)."""
    rid = trail.request.record_id
    kind = decision["decision"]
    if kind == KlaDecision.BLOCK:
        raise OutcomeRefused(
            f"action request {rid} was blocked by policy: no tool call may follow it; "
            'record {"outcome": {"status": "blocked"}} without a tool_call'
        )
    if kind != KlaDecision.REQUIRE_APPROVAL:
        return
    task_id = decision.get("task_id")
    if standing is None or standing[1]["outcome"] != "approve":
        state = (
            "denied"
            if standing is not None and standing[1]["outcome"] == "deny"
            else ("not approved yet")
        )
        raise OutcomeRefused(
            f"action request {rid} needs an approval before any tool call and is {state}",
            task_id=task_id if isinstance(task_id, str) and state != "denied" else None,
        )
    ask = desk_ask(
        rec.guardian,
        trail.request.value(),
        trail.request.digest,
        decision["policy_decision_id"],
        who,
        None,
        scope=scope,
        requester=trail.request.principal,
        cited_task_id=task_id if isinstance(task_id, str) else "(none)",
    )
    resolution = rec.desk.resolve(
        tx,
        ask,
        {
            "wire": WIRE,
            "route": "POST /v1/action-requests/{id}/outcome",
            "action_request_id": rid,
        },
    )
    if resolution.outcome is not Outcome.GRANTED:
        raise OutcomeRefused(
            f"the approval of action request {rid} cannot be used: {resolution.text}"
        )


def consistent(
    rec: Recorder,
    tx: KlaTx,
    trail: Trail,
    decision: dict[str, Any],
    standing: tuple[KlaRow, dict[str, Any]] | None,
    status: str,
) -> None:
    """An outcome without a tool call must agree with what Warden decided: ``blocked``
    only after a block, ``denied`` only after an approver's deny, ``expired`` only
    when the approval task expired; nothing but ``cancelled`` while a human is still
    deciding (the record would otherwise contradict the desk)."""
    rid = trail.request.record_id
    kind = decision["decision"]
    task = rec.task(tx, decision.get("task_id"))
    pending = (
        kind == KlaDecision.REQUIRE_APPROVAL
        and standing is None
        and task is not None
        and task.state is ApprovalState.PENDING
    )
    lapsed = task is not None and (
        task.state is ApprovalState.EXPIRED
        or (
            task.state in (ApprovalState.PENDING, ApprovalState.APPROVED)
            and task.expires_at <= rec.desk.now()
        )
    )
    pending = pending and not lapsed
    allowed = {
        "blocked": kind == KlaDecision.BLOCK,
        "denied": standing is not None and standing[1]["outcome"] == "deny",
        "expired": lapsed,
        "cancelled": True,  # the schema refuses it after a block (only blocked fits)
        "failed": not pending,
        "succeeded": True,  # the schema refuses a success without its tool_call
    }
    if not allowed.get(status, False):
        raise OutcomeRefused(
            f"an outcome {status!r} contradicts action request {rid}'s record "
            f"(decision {kind}"
            + (", awaiting approval" if pending else "")
            + (f", approval {standing[1]['outcome']}" if standing is not None else "")
            + ")"
        )
    if status == "cancelled" and pending and task is not None:
        # The agent gives up: the approvers' task is withdrawn (chained on the desk).
        rec.desk.cancel(tx, task, "the agent cancelled the action request")
