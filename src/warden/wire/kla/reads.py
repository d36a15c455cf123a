"""The read routes: an action request's trail, one record, an evidence bundle, the keys.

``GET /v1/action-requests/{id}``, ``GET /v1/kla-records/{record_id}``,
``GET /v1/executions/{execution_id}/evidence`` and ``GET /v1/keys`` (seed 004).
Approvers and admins read every record; an agent only what its principal submitted,
another's reading as absent (``404 record:not_found``; docs/decisions.md, item 81).
Evidence bundles are items 83 and 86; the bundle itself is built in :mod:`.evidence`.
"""

from __future__ import annotations

from typing import Any

from warden.approvals.tasks import ApprovalState, Task
from warden.errors import IntegrityError
from warden.identity.api_keys import Identity
from warden.kla.evidence import (
    HELD,
    PROCESSED,
    Evidence,
    SeveralOwners,
    execution_evidence,
    now_stamp,
)
from warden.kla.recorder import Recorder
from warden.kla.records import KlaDecision
from warden.kla.trail import Trail, find, find_record, reads_all
from warden.wire.kla.answers import Answer, next_steps, not_found, stored, task_ref
from warden.wire.kla.models import ActionRequestData, EvidenceData, KeysData, RecordData
from warden.wire.spend.render import Refusal, invalid, success


def _several(exc: SeveralOwners) -> Refusal:
    hint = "name whose one to read with ?principal=<principal>"
    return invalid(f"{exc.message} with ?principal=", gate="input:several_owners", hint=hint)


def get_request(rec: Recorder, rid: str, who: Identity, principal: str | None = None) -> Answer:
    with rec.store.transaction() as tx:
        try:
            trail = find(tx.kla, rid, who, principal)
        except SeveralOwners as exc:
            raise _several(exc) from exc
        if trail is None:
            raise not_found(f"action request {rid!r:.80}")
        decision = trail.decision.value() if trail.decision is not None else None
    task_id = decision.get("task_id") if decision is not None else None
    task = rec.desk.get(task_id) if isinstance(task_id, str) else None  # expired if due
    data = ActionRequestData(
        status=_status(trail, decision, task),
        action_request=stored(trail.request),
        approval_events=[stored(r) for r in trail.approvals],
    )
    # Members that do not apply are left out (not null).
    if trail.decision is not None:
        data.decision = stored(trail.decision)
    if trail.audit is not None:
        data.audit_event = stored(trail.audit)
    ref = task_ref(rec, task)
    if ref is not None:
        data.task = ref
    steps = ["GET /v1/kla-records/{id} reads one record by id"]
    if trail.request.execution_id is not None and trail.request.status == PROCESSED:
        steps.append(f"GET /v1/executions/{trail.request.execution_id}/evidence exports the bundle")
    if decision is not None and trail.audit is None:
        steps.insert(0, next_steps(rid, decision["decision"], ref)[0])
    return Answer(200, success(data, steps))


def _status(trail: Trail, decision: dict[str, Any] | None, task: Task | None) -> str:
    if trail.request.status == HELD or decision is None:
        return "held_for_review"
    if trail.audit is not None:
        return "completed"
    kind = decision["decision"]
    if kind == KlaDecision.BLOCK:
        return "blocked"
    if kind != KlaDecision.REQUIRE_APPROVAL:
        return "allowed"
    standing = trail.approval()
    if standing is not None and standing[1]["outcome"] == "approve":
        return "approved"
    if standing is not None and standing[1]["outcome"] == "deny":
        return "denied"
    if task is not None and task.state is ApprovalState.EXPIRED:
        return "expired"
    return "awaiting_approval"


def get_record(
    rec: Recorder, record_id: str, who: Identity, principal: str | None = None
) -> Answer:
    with rec.store.transaction() as tx:
        try:
            row = find_record(tx.kla, record_id, who, principal)
        except SeveralOwners as exc:
            raise _several(exc) from exc
    if row is None:
        raise not_found(f"KLA record {record_id!r:.80}")
    steps = [
        "warden verify-record FILE --digest <digest> --signature <signature> "
        "--public-key <GET /v1/keys as a file> --kid <kid> checks it offline"
    ]
    if row.action_request_id is not None:
        steps.append(f"GET /v1/action-requests/{row.action_request_id} shows its trail")
    return Answer(200, success(RecordData(record=stored(row)), steps))


def evidence_of(
    rec: Recorder, execution_id: str, who: Identity, principal: str | None = None
) -> Evidence:
    """The evidence of one execution: an agent's own (another's reads as absent), or the
    one of ``principal`` (approvers and admins; needed when several principals used the
    execution_id, decision 933). A records table that disagrees with the audit chain is
    ``500 evidence:integrity_failed``: nothing the chain does not vouch for is signed."""
    missing = not_found(f"processed action request in execution {execution_id!r:.80}")
    if not reads_all(who):
        if principal not in (None, who.principal):
            raise missing
        principal = who.principal
    try:
        ev = execution_evidence(rec.store, execution_id, rec.signer, rec.registry, principal)
    except SeveralOwners as exc:
        raise _several(exc) from exc
    except IntegrityError as exc:
        raise Refusal("evidence:integrity_failed", 500, exc.message) from exc
    if ev is None:
        raise missing
    return ev


def evidence(
    rec: Recorder, execution_id: str, who: Identity, principal: str | None = None
) -> Answer:
    ev = evidence_of(rec, execution_id, who, principal)
    data = EvidenceData(
        manifest=ev.manifest(rec.signer, now_stamp(rec.now())),
        records=[s.to_line() for s in ev.sealed],
        keys=ev.jwks(),
        held_for_review=ev.held_for_review,
    )
    return Answer(
        200,
        success(
            data,
            [
                "Write manifest to manifest.json, each of records as one line of "
                "records.jsonl and keys to keys/jwks.json, then run "
                "`warden verify-bundle DIR --trusted-keys <GET /v1/keys saved as a file>`",
                "`warden verify` checks the audit chain whose head is manifest.chain_head",
            ],
        ),
    )


def keys(rec: Recorder) -> Answer:
    return Answer(
        200,
        success(
            KeysData(keys=rec.signer.jwks()["keys"]),
            [
                "Save this JWKS and verify Warden's records offline: warden verify-record "
                "FILE --digest … --signature … --public-key jwks.json --kid <kid>",
                "GET /v1/executions/{execution_id}/evidence exports an evidence bundle",
            ],
        ),
    )
