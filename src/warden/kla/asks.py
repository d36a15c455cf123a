"""An action request as the Guardian and the approval desk see it, and the policy
decision record the Guardian's verdict becomes.

The Guardian decides an action request v1 record under the policy method ``kla/action``
with the KLA vocabulary as ``args`` (DESIGN.md; docs/decisions.md, item 77). A
``require_approval`` decision files one desk task (item 78) from :func:`desk_ask`; the
outcome rebuilds the same ask (same action, hence the same action hash) to consume the
approval it grants (item 80).
"""

from __future__ import annotations

from typing import Any

from warden.approvals.desk import ApprovalDesk, AskRequest, DeskTx
from warden.approvals.tasks import Requester, Task, TaskKind
from warden.core.guardian import Guardian
from warden.core.pipeline import Decided, Pipeline
from warden.core.types import ActionRequest, Verdict
from warden.gates.approval import ask_terms, policy_of
from warden.gates.desk import DeskAsk
from warden.identity.api_keys import Identity
from warden.kla.records import SCHEMA_VERSION, KlaDecision
from warden.ledger.decided import caller_record, verdict_record

#: The policy method an action request is decided under (``hooks: [kla/action]``).
METHOD = "kla/action"
WIRE = "kla"


def policy_args(record: dict[str, Any]) -> dict[str, str]:
    """The policy's ``args`` of an action request (DESIGN.md: the KLA vocabulary)."""
    args = {
        "purpose": record["purpose"],
        "resource_type": record["resource"]["type"],
        "resource_id": record["resource"]["id"],
        "data_boundary_ref": record["data_boundary_ref"],
        "environment": record["environment"],
    }
    amount = record.get("amount")
    if amount is not None:
        args["amount"] = amount["value"]
        args["currency"] = amount["currency"]
    return args


def action_request(record: dict[str, Any], who: Identity) -> ActionRequest:
    """The Guardian's request for a validated action request record."""
    execution = record["correlation"]["execution_id"]
    return ActionRequest(
        method=METHOD,
        payload=record,
        metadata={"principal": who.principal, "correlation": record["correlation"]},
        tool={
            "name": record["action"],
            "version": "",
            "provider": WIRE,
            "operation": "",
            "capability": WIRE,
        },
        args=policy_args(record),
        raw_command="",
        session={"id": execution, "agent_id": who.principal, "step_count": 0},
        agent=who.facts(),
    )


def desk_ask(
    guardian: Guardian,
    record: dict[str, Any],
    digest: str,
    decision_id: str,
    who: Identity,
    verdict: Verdict | None,
    *,
    scope: str,
    requester: str | None = None,
    cited_task_id: str | None = None,
) -> AskRequest:
    """The desk request of a require_approval decision; rebuilt identically (same
    action, hence the same action hash, and the same ``scope``: the execution's
    :attr:`~warden.kla.evidence.Placement.task_scope`) to consume the approval at the
    outcome."""
    rid = record["action_request_id"]
    execution = record["correlation"]["execution_id"]
    principal = requester or who.principal
    arguments = {"action_request_id": rid, "action_request_digest": digest, **policy_args(record)}
    detail: dict[str, Any] = {
        "action": record["action"],
        "action_request_id": rid,
        "policy_decision_id": decision_id,
        "execution_id": execution,
        "environment": record["environment"],
    }
    if "amount" in record:
        detail["amount"] = record["amount"]["value"]
        detail["currency"] = record["amount"]["currency"]
    # Without a verdict the ask only cites its task (at the outcome), which is never
    # filed anew: the terms are unused.
    terms: dict[str, Any] = (
        ask_terms(guardian, verdict)
        if verdict is not None
        else {"approver_group": "", "question": "", "timeout_s": 0.0}
    )
    return AskRequest(
        kind=TaskKind.ACTION_REQUEST,
        wire=WIRE,
        scope=scope,
        action={"method": METHOD, "name": record["action"], "arguments": arguments},
        requester=Requester(
            agent_id=principal,
            principal=who.owner if who.owner and principal == who.principal else principal,
        ),
        correlation={
            "key_id": who.key_id,
            "correlation_id": record["correlation"]["correlation_id"],
            "execution_id": execution,
            "action_request_id": rid,
            "policy_decision_id": decision_id,
        },
        policy=policy_of(verdict) if verdict is not None else {},
        detail=detail,
        cited_task_id=cited_task_id,
        **terms,
    )


def decide(
    pipeline: Pipeline,
    desk: ApprovalDesk,
    tx: DeskTx,
    record: dict[str, Any],
    digest: str,
    decision_id: str,
    who: Identity,
    scope: str,
) -> tuple[Decided, Task | None]:
    """Decide a validated action request in ``tx``: the pipeline with the desk ask as
    its gate (:class:`~warden.gates.desk.DeskAsk` over :func:`desk_ask`), so a
    ``require_approval`` files its task in the transaction that then writes the policy
    decision record and chains it. Returns the decision and the task it filed (None
    unless the policy asked). ``scope`` is the desk scope of the request's execution
    (:attr:`~warden.kla.evidence.Placement.task_scope`). Store failures propagate
    (``tx`` rolls back)."""
    rid = record["action_request_id"]
    gate = DeskAsk(
        desk,
        tx,
        lambda _req, verdict: desk_ask(
            pipeline.guardian, record, digest, decision_id, who, verdict, scope=scope
        ),
        {"wire": WIRE, "action_request_id": rid, "key_id": who.key_id},
    )
    decided = pipeline.run(who.as_principal(), action_request(record, who), gates=[gate])
    return decided, gate.task


def decided_record(who: Identity, verdict: Verdict) -> dict[str, Any]:
    """The additive ``decided`` object of the ``warden/kla.policy_decision`` entry
    (docs/decisions.md 600): the caller :func:`action_request` was built for and the
    Guardian's verdict (its effect: the record's KLA decision folds ask and defer, allow
    with a warning and modify). The request is the ``warden/kla.action_request`` entry
    before it, which carries the record."""
    return {"caller": caller_record(who), "verdict": verdict_record(verdict)}


#: The longest ``reasoning`` a policy decision record carries (characters).
MAX_REASONING = 4096


def policy_decision_record(
    guardian: Guardian,
    record: dict[str, Any],
    digest: str,
    decision_id: str,
    decision: KlaDecision,
    verdict: Verdict,
    task: Task | None,
    stamp: str,
) -> dict[str, Any]:
    """The policy decision record (seed 004) of ``verdict`` on the action request
    ``record`` (its ``digest``): the rules and reasons, the bundle that decided (the
    verdict's, else the loaded one), the reasoning cut to :data:`MAX_REASONING`
    characters, and the desk task a ``require_approval`` filed."""
    bundle = verdict.bundle or guardian.engine.bundle.ref
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "policy_decision_id": decision_id,
        "action_request_id": record["action_request_id"],
        "action_request_digest": digest,
        "correlation": record["correlation"],
        "decision": decision.value,
        "rules": [r.to_wire() for r in verdict.policy_references],
        "reasons": list(verdict.reason_codes),
        "policy": {"bundle_id": bundle.id, "version": bundle.version, "digest": bundle.digest},
        "decided_at": stamp,
    }
    if verdict.reasoning:
        out["reasoning"] = verdict.reasoning[:MAX_REASONING]
    if task is not None:
        out["task_id"] = task.id
    return out
