"""The outcome path: ``POST /v1/action-requests/{id}/outcome`` writes the audit event.

The agent's outcome report is sealed with Warden's key as the request's audit event and
chained (seed 004: … → audit). It is refused (``409 record:not_authorized``) when it
names a tool call the decision did not allow: after ``block``, or after
``require_approval`` without an approval it consumes then (an approval authorizes one
step only; docs/decisions.md, item 80). An outcome without a tool call must agree with
the record (item 87). A second report replays the recorded one when it is the same,
else is ``409 record:conflict``.
"""

from __future__ import annotations

from typing import Any

from warden.errors import InvalidParams
from warden.identity.api_keys import Identity
from warden.kla.evidence import HELD, Placing, now_stamp
from warden.kla.outcome_rules import OutcomeRefused, authorize, consistent
from warden.kla.recorder import Recorder, new_id
from warden.kla.records import SCHEMA_VERSION, RecordKind
from warden.kla.trail import Trail
from warden.store.kla_sql import KlaRow
from warden.wire.kla.answers import Answer, conflict, not_authorized, not_found, stored
from warden.wire.kla.models import OutcomeData, OutcomeRequest
from warden.wire.spend.models import Resolution
from warden.wire.spend.render import Refusal, retry, success


def outcome(rec: Recorder, rid: str, body: OutcomeRequest, who: Identity) -> Answer:
    """``POST /v1/action-requests/{id}/outcome``: the audit event (module docstring)."""
    with rec.store.transaction() as tx:
        trail = Trail.of(tx.kla.for_request(rid, who.principal), rid)  # decision 970
        if trail is None:
            raise not_found(f"action request {rid!r:.80} submitted with this key's principal")
        if trail.request.status == HELD or trail.decision is None:
            raise not_authorized(
                f"action request {rid} is held for review (unsupported schema_version) and "
                "was never decided: no outcome can be recorded for it"
            )
        wanted = body.model_dump(exclude_none=True)
        if trail.audit is not None:
            audit = trail.audit.value()
            recorded = {k: audit[k] for k in ("tool_call", "outcome") if k in audit}
            if recorded != wanted:
                raise conflict(
                    f"action request {rid} already has an audit event "
                    f"({trail.audit.record_id}) with a different outcome",
                    f"GET /v1/action-requests/{rid} shows the recorded outcome",
                )
            answer = _audited(trail.audit)
            answer.body["replayed"] = True
            return answer
        decision = trail.decision.value()
        standing = trail.approval()
        at = Placing(who.principal, trail.request.execution_id).placement(tx)
        try:
            if body.tool_call is not None:
                authorize(rec, tx, trail, decision, standing, who, at.task_scope)
            else:
                consistent(rec, tx, trail, decision, standing, wanted["outcome"]["status"])
        except OutcomeRefused as exc:
            waiting = (
                Resolution(type="human_approval", taskId=exc.task_id)
                if exc.task_id is not None
                else None
            )
            raise not_authorized(exc.message, waiting) from exc
        stamp = now_stamp(rec.now())
        record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "audit_event_id": new_id("au"),
            "correlation": decision["correlation"],
            "action_request": {"action_request_id": rid, "digest": trail.request.digest},
            "policy_decision": {
                "policy_decision_id": decision["policy_decision_id"],
                "digest": trail.decision.digest,
                "decision": decision["decision"],
            },
            **wanted,
            "recorded_at": stamp,
        }
        if standing is not None:
            record["approval_event"] = {
                "approval_event_id": standing[0].record_id,
                "digest": standing[0].digest,
                "outcome": standing[1]["outcome"],
            }
        try:
            sealed = rec.seal(RecordKind.AUDIT_EVENT, record)
        except InvalidParams as exc:
            pointer = str(exc.data.get("pointer", ""))
            raise Refusal(
                "record:schema_invalid",
                400,
                f"this outcome cannot be recorded for a {decision['decision']} decision: "
                f"{exc.message}",
                resolution=retry(
                    "a blocked action's outcome is blocked; succeeded and failed name the "
                    "tool_call; a result_digest needs a tool_call",
                    note=f"pointer {pointer or '/'}",
                ),
            ) from exc
        row = rec.row(sealed, rid, decision["correlation"]["execution_id"], who.principal, stamp)
        tx.kla.insert(row)
        rec.append(tx, row, record, event=row.kind, at=at)
        return _audited(row)


def _audited(row: KlaRow) -> Answer:
    rid = row.action_request_id or ""
    return Answer(
        200,
        success(
            OutcomeData(audit_event=stored(row)),
            [
                f"GET /v1/action-requests/{rid} shows the whole trail",
                f"GET /v1/executions/{row.execution_id}/evidence exports the evidence bundle",
            ],
        ),
    )
