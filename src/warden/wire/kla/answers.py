"""What the action request routes answer: an :class:`Answer`, or a refusal.

Successes and refusals use the seed ``003_…`` envelope of the spend wire
(:mod:`warden.wire.spend.render`); the refusals here are the ``record:*`` gates of the
action request wire (seed 004; docs/decisions.md, items 73–87), each with a fixed
message and a resolution that says what to send instead. :func:`next_steps` are the
``nextActions`` that tell an agent what may follow a decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from warden.approvals.tasks import Task
from warden.kla.recorder import Recorder
from warden.kla.records import (
    SCHEMA_VERSION,
    SUPPORTED_SCHEMA_VERSIONS,
    KlaDecision,
    RecordKind,
)
from warden.store.kla_sql import KlaRow
from warden.wire.kla.models import StoredRecord, TaskRef
from warden.wire.spend.models import Resolution
from warden.wire.spend.render import Refusal, retry


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


# -- refusals -----------------------------------------------------------------------------


def schema_invalid(pointer: str, message: str) -> Refusal:
    at = pointer or "/"
    return Refusal(
        "record:schema_invalid",
        400,
        f"the action request does not validate at {at}: {message}; nothing was stored",
        resolution=retry(
            f"fix the record at {at} (schema: https://warden.dev/schemas/kla/v1/"
            "action-request.json) and submit it again",
            note=f"pointer {at}",
        ),
    )


def signature_invalid(message: str) -> Refusal:
    return Refusal(
        "record:signature_invalid",
        400,
        f"{message}; nothing was stored",
        resolution=retry(
            "sign the 32 raw bytes of the record's sha256 digest (RFC 8785 canonical form) "
            "with Ed25519, send it base64url without padding in X-Warden-Signature and the "
            "key's kid (in Warden's --kla-keys registry) in X-Warden-Key-Id, or send neither"
        ),
    )


def not_found(what: str) -> Refusal:
    return Refusal(
        "record:not_found",
        404,
        f"no {what}",
        resolution=retry("use an id that POST /v1/action-requests returned to this key"),
    )


def conflict(message: str, hint: str) -> Refusal:
    return Refusal("record:conflict", 409, message, resolution=retry(hint))


def taken(rid: str) -> Refusal:
    """A known ``action_request_id`` under a different record (or principal)."""
    return conflict(
        f"action_request_id {rid!r:.80} is already taken by a different record; nothing was stored",
        "a new request needs a new action_request_id; resubmitting the same record "
        "(same bytes after RFC 8785) replays its answer",
    )


def not_authorized(message: str, resolution: Resolution | None = None) -> Refusal:
    return Refusal("record:not_authorized", 409, message, resolution=resolution)


def held(row: KlaRow, version: str) -> Refusal:
    """``422 record:unsupported_schema_version``: stored for review, not processed."""
    supported = ", ".join(sorted(SUPPORTED_SCHEMA_VERSIONS[RecordKind.ACTION_REQUEST]))
    return Refusal(
        "record:unsupported_schema_version",
        422,
        f"schema_version {version!r:.40} is not supported (supported: {supported}): the "
        f"record is stored for review as {row.record_id} (digest {row.digest}) and was not "
        "processed: no decision was made",
        resolution=retry(f'send the request as schema_version "{SCHEMA_VERSION}"'),
    )


# -- successes ----------------------------------------------------------------------------


def stored(row: KlaRow) -> StoredRecord:
    """One stored record as the wire shows it (members that do not apply left out)."""
    optional = {
        k: v
        for k, v in (
            ("signature", row.signature),
            ("kid", row.kid),
            ("action_request_id", row.action_request_id),
            ("execution_id", row.execution_id),
        )
        if v is not None
    }
    return StoredRecord(
        id=row.record_id,
        kind=row.kind,
        record=row.value(),
        digest=row.digest,
        status=cast(Any, row.status),
        created_at=row.created_at,
        **optional,
    )


def next_steps(rid: str, decision: str, task: TaskRef | None) -> list[str]:
    """The ``nextActions`` after a decision, until the outcome is recorded."""
    outcome = f"POST /v1/action-requests/{rid}/outcome"
    show = f"GET /v1/action-requests/{rid} shows the request and every record after it"
    if decision == KlaDecision.BLOCK:
        return [
            "Do not carry out the action: the policy blocked it",
            f'{outcome} {{"outcome": {{"status": "blocked"}}}} records that it was not done',
            show,
        ]
    if decision == KlaDecision.REQUIRE_APPROVAL:
        where = (task.url if task and task.url else None) or (
            f"GET /v1/approvals/{task.id}" if task else "the approval desk"
        )
        return [
            f"Wait: a human decides on the approval desk ({where}); poll "
            f"GET /v1/action-requests/{rid} until its status is approved or denied",
            f'Once approved, carry out the action once, then {outcome} {{"tool_call": '
            '{"name", "params_digest"}, "outcome": {"status", "result_digest"}}',
            f'If denied: {outcome} {{"outcome": {{"status": "denied"}}}}',
        ]
    return [
        f'Carry out the action, then {outcome} {{"tool_call": {{"name", "params_digest"}}, '
        '"outcome": {"status": "succeeded", "result_digest"}}',
        show,
    ]


def task_ref(rec: Recorder, task: Task | None) -> TaskRef | None:
    """The ``task`` member of an answer: the desk task a decision filed, with its state
    and the desk's URL for it; ``None`` when the decision filed none."""
    if task is None:
        return None
    return TaskRef(id=task.id, state=task.state.value, url=rec.desk.task_url(task.id))
