"""The desk listener that writes approval events (seed 004: decision → approval).

An approver's decision on the approval desk, on a task filed for a ``require_approval``
decision (:attr:`TaskKind.ACTION_REQUEST`), writes a signed approval event on the
execution's audit chain, inside the desk's transaction (docs/decisions.md, item 79).
Which event stands when there are several is :meth:`.trail.Trail.approval`.
"""

from __future__ import annotations

from typing import Any, cast

from warden.approvals.desk import Approver, DeskTx
from warden.approvals.tasks import Event, Task
from warden.errors import WardenError
from warden.kla.evidence import Placing, now_stamp
from warden.kla.recorder import KlaTx, Recorder, new_id
from warden.kla.records import SCHEMA_VERSION, RecordKind

_OUTCOMES = {Event.APPROVED: "approve", Event.DENIED: "deny", Event.REROUTED: "re_route"}


def on_desk_transition(
    rec: Recorder, tx: DeskTx, task: Task, event: Event, by: Approver | None, reason: str
) -> None:
    """A desk listener for :attr:`TaskKind.ACTION_REQUEST`: an approver's approve, deny
    or re-route writes a signed approval event, chained on the execution's chain, in
    the desk's transaction (votes short of N-of-M, expiry and consumption write none)."""
    outcome = _OUTCOMES.get(event)
    if outcome is None or by is None:
        return
    ktx = cast(KlaTx, tx)
    # The requester's own decision: ids are per principal (decision 970).
    pd_id = str(task.detail.get("policy_decision_id", ""))
    decision_row = ktx.kla.get(pd_id, task.requester.agent_id)
    if decision_row is None:  # pragma: no cover - filed with its decision, one transaction
        raise WardenError(f"task {task.id} names no stored policy decision")
    decision = decision_row.value()
    stamp = now_stamp(rec.now())
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "approval_event_id": new_id("ae"),
        "action_request_id": decision["action_request_id"],
        "policy_decision_id": decision["policy_decision_id"],
        "task_id": task.id,
        "correlation": decision["correlation"],
        "maker": {"principal": task.requester.principal or task.requester.agent_id},
        "checker": {"principal": by.principal, "key_id": by.key_id},
        "outcome": outcome,
        "reason": reason or f"{outcome} (no reason given)",
        "decided_at": stamp,
    }
    if outcome == "re_route":
        record["routed_to"] = task.approver_group
    sealed = rec.seal(RecordKind.APPROVAL_EVENT, record)
    row = rec.row(
        sealed,
        decision["action_request_id"],
        decision["correlation"]["execution_id"],
        decision_row.principal,
        stamp,
    )
    at = Placing(row.principal, row.execution_id).placement(ktx)
    ktx.kla.insert(row)
    rec.append(ktx, row, record, event=row.kind, at=at)
