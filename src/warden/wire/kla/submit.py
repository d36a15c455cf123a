"""The submit path: ``POST /v1/action-requests`` (seed 004: request → decision).

Takes an AI agent action request v1 record and, in order (docs/decisions.md, items
73–78):

1. reads its ``schema_version``: a version Warden does not support is stored as
   received with status ``held_for_review``, chained (``warden/kla.held``) and
   answered ``422 record:unsupported_schema_version``: kept for review, not processed;
2. computes its digest (``sha256:`` over the RFC 8785 canonical bytes; a value outside
   the RFC 8785 domain, such as ``1e400``, is ``400 input:invalid_json``), then
   validates it against the shipped JSON Schema with date-time format checking
   (``400 record:schema_invalid`` with the JSON pointer; nothing is stored);
3. checks a
   detached signature sent beside it (``X-Warden-Signature`` / ``X-Warden-Key-Id``)
   against the verifier-held key registry (``--kla-keys``; ``400
   record:signature_invalid``);
4. a known ``action_request_id``: the same digest from the same principal replays the
   stored answer, anything else is ``409 record:conflict``;
5. runs the decision pipeline (policy method ``kla/action``) with the desk ask as its
   gate (:func:`warden.kla.asks.decide`: ``require_approval`` files an approval task),
   writes the policy decision record signed with Warden's key, and appends the request
   and the decision to the execution's Warden audit chain, all in one database
   transaction; the observers hear of it once that has committed.
"""

from __future__ import annotations

import json
from typing import Any

from warden.approvals.tasks import Task
from warden.core.observe import TraceParent
from warden.errors import WardenError
from warden.identity.api_keys import Identity, KeyStillLive
from warden.kla.asks import decide, decided_record, policy_decision_record
from warden.kla.digest import record_digest
from warden.kla.evidence import HELD, PROCESSED, Placing, now_stamp
from warden.kla.recorder import KlaTx, Recorder, canonical_text, new_id
from warden.kla.records import (
    SUPPORTED_SCHEMA_VERSIONS,
    RecordKind,
    kla_decision,
    shape_error,
)
from warden.kla.trail import Trail
from warden.kla.verify import verify_signature
from warden.ledger.warden_chain import chained_attempts
from warden.store.kla_sql import KlaRow
from warden.wire.kla.answers import (
    Answer,
    held,
    next_steps,
    schema_invalid,
    signature_invalid,
    taken,
    task_ref,
)
from warden.wire.kla.models import RequestRef, SubmitData
from warden.wire.spend.auth import key_check, unauthenticated
from warden.wire.spend.render import Refusal, retry, success

MAX_ID = 256


def submit(
    rec: Recorder, body: Any, signature: str | None, kid: str | None, who: Identity
) -> Answer:
    """``POST /v1/action-requests`` (the steps in the module docstring)."""
    if not isinstance(body, dict):
        raise schema_invalid("", "an action request is one JSON object")
    version = body.get("schema_version")
    if not isinstance(version, str):
        raise schema_invalid("/schema_version", "schema_version is required (a string)")
    is_held = version not in SUPPORTED_SCHEMA_VERSIONS[RecordKind.ACTION_REQUEST]
    try:
        # Before the schema: a number beyond IEEE 754 (1e400 parses as infinity) would
        # otherwise be reported by the schema as the null it renders to.
        digest = record_digest(body)
        text = canonical_text(body)
    except WardenError as exc:
        raise Refusal(
            "input:invalid_json",
            400,
            f"the record cannot be canonicalized (RFC 8785): {exc.message}",
            resolution=retry("send numbers within IEEE 754 range and valid Unicode"),
        ) from exc
    if not is_held:
        err = shape_error(body, RecordKind.ACTION_REQUEST)
        if err is not None:
            raise schema_invalid(*err)
    _check_signature(rec, digest, signature, kid)
    if is_held:
        _hold(rec, body, version, digest, text, signature, kid, who)
    return _process(rec, body, digest, text, signature, kid, who)


def _check_signature(rec: Recorder, digest: str, signature: str | None, kid: str | None) -> None:
    if signature is None and kid is None:
        return
    if signature is None:
        raise signature_invalid("X-Warden-Key-Id was sent without X-Warden-Signature")
    if rec.registry is None:
        raise signature_invalid(
            "the request is signed but this Warden holds no key registry to check it "
            "against (start it with --kla-keys)"
        )
    if kid is None:
        raise signature_invalid("a signature needs its X-Warden-Key-Id")
    if kid not in rec.registry:
        raise signature_invalid(f"kid {kid!r:.80} is not in Warden's key registry")
    if not verify_signature(rec.registry.get_key(kid), digest, signature):
        raise signature_invalid(
            f"the Ed25519 signature does not verify over {digest} with key {kid!r:.80}"
        )


def _trace_parent(record: dict[str, Any]) -> TraceParent | None:
    """The W3C trace the action request names in ``correlation`` (its schema allows
    ``trace_id`` and ``span_id`` as lowercase hex, neither all zeros), when both are
    there: the decision's span is a child of the caller's span (decision 401)."""
    correlation = record["correlation"]
    trace_id, span_id = correlation.get("trace_id"), correlation.get("span_id")
    if isinstance(trace_id, str) and isinstance(span_id, str):
        return TraceParent(trace_id, span_id)
    return None


def _confirm(tx: KlaTx, live: KeyStillLive | None) -> None:
    """A key answered from memory changes and answers nothing unless it is still live,
    read in this transaction (decision 702)."""
    if live is not None and not live.confirm(tx):
        raise unauthenticated("Bearer")


def _usable_id(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID else None


def _hold(
    rec: Recorder,
    body: dict[str, Any],
    version: str,
    digest: str,
    text: str,
    signature: str | None,
    kid: str | None,
    who: Identity,
) -> None:
    """Store a record of an unsupported version for review, then refuse it (422)."""
    rid = _usable_id(body.get("action_request_id"))
    correlation = body.get("correlation")
    execution = (
        _usable_id(correlation.get("execution_id")) if isinstance(correlation, dict) else None
    )
    row = KlaRow(
        record_id=rid or f"held_{digest[len('sha256:') :][:32]}",
        kind=RecordKind.ACTION_REQUEST.value,
        action_request_id=rid,
        execution_id=execution,
        principal=who.principal,
        digest=digest,
        record=text,
        signature=signature,
        kid=kid if signature is not None else None,
        status=HELD,
        created_at=now_stamp(rec.now()),
    )
    live = key_check()
    with rec.store.transaction() as tx:
        existing = tx.kla.get(row.record_id, who.principal)
        _confirm(tx, live)
        if existing is None:
            at = Placing(who.principal, execution).placement(tx)
            tx.kla.insert(row)
            rec.append(tx, row, body, event="held", at=at)
            stored_row = row
        elif existing.status == HELD and existing.digest == digest:
            stored_row = existing
        else:
            raise taken(row.record_id)
    raise held(stored_row, version)


def _process(
    rec: Recorder,
    record: dict[str, Any],
    digest: str,
    text: str,
    signature: str | None,
    kid: str | None,
    who: Identity,
) -> Answer:
    rid: str = record["action_request_id"]
    execution: str = record["correlation"]["execution_id"]

    placing = Placing(who.principal, execution)  # decisions 930-931

    def attempt(unlocked: bool) -> Answer:
        live = key_check()
        with rec.store.transaction(unlocked_heads=unlocked) as tx:
            # Sent with BEGIN and the record's read: the caller's key still live, when
            # answered from memory (decision 702), and the execution chain's head, read
            # without a lock (decision 800: a desk transition of this execution's task
            # locks the desk chain before it, and this request may file a task first).
            if live is not None:
                live.prefetch(tx)
            rec.chain_read(tx, execution)
            placing.prefetch(tx)
            existing = tx.kla.get(rid, who.principal)  # decision 970
            _confirm(tx, live)
            if existing is not None:
                if existing.kind != RecordKind.ACTION_REQUEST.value or existing.digest != digest:
                    raise taken(rid)
                if existing.status == HELD:  # pragma: no cover - a held record differs
                    raise taken(rid)
                trail = Trail.of(tx.kla.for_request(rid, who.principal), rid)
                assert trail is not None and trail.decision is not None
                filed = rec.task(tx, trail.decision.value().get("task_id"))
                answer = _submitted(rec, trail.request, trail.decision, filed)
                answer.body["replayed"] = True
                return answer
            now = rec.now()
            stamp = now_stamp(now)
            decision_id = new_id("pd")
            at = placing.placement(tx)  # prefetched; its desk scope (decision 972)
            decided, task = decide(
                rec.pipeline, rec.desk, tx, record, digest, decision_id, who, at.task_scope
            )
            verdict = decided.verdict
            decision = kla_decision(verdict.decision, warn=verdict.warn)
            decision_record = policy_decision_record(
                rec.guardian, record, digest, decision_id, decision, verdict, task, stamp
            )
            sealed = rec.seal(RecordKind.POLICY_DECISION, decision_record)
            request_row = KlaRow(
                record_id=rid,
                kind=RecordKind.ACTION_REQUEST.value,
                action_request_id=rid,
                execution_id=execution,
                principal=who.principal,
                digest=digest,
                record=text,
                signature=signature,
                kid=kid if signature is not None else None,
                status=PROCESSED,
                created_at=stamp,
            )
            decision_row = rec.row(sealed, rid, execution, who.principal, stamp)
            tx.kla.insert(request_row)
            rec.append(tx, request_row, record, event=request_row.kind, at=at)
            tx.kla.insert(decision_row)
            rec.append(
                tx,
                decision_row,
                decision_record,
                event=decision_row.kind,
                at=at,
                decided=decided_record(who, verdict),
            )
            # Stage 7, once the records are durable: a rolled-back transaction reports nothing.
            rec.pipeline.finished_after(
                tx, "kla", decided, audit={"action_request_id": rid}, parent=_trace_parent(record)
            )
            return _submitted(rec, request_row, decision_row, task)

    return chained_attempts(attempt)


def _submitted(rec: Recorder, request: KlaRow, decision_row: KlaRow, task: Task | None) -> Answer:
    decision = decision_row.value()
    rid = request.record_id
    signature, kid = decision_row.signature, decision_row.kid
    if signature is None and decision_row.signatures:
        # ML-DSA-65 only (evidence_signing_keys, issue 21): its signature is the one.
        first = json.loads(decision_row.signatures)[0]
        signature, kid = first["signature"], first["kid"]
    data = SubmitData(
        action_request=RequestRef(id=rid, digest=request.digest, status="processed"),
        decision=decision,
        decision_digest=decision_row.digest,
        decision_signature=signature or "",
        kid=kid or "",
    )
    ref = task_ref(rec, task)
    if ref is not None:
        data.task = ref
    return Answer(200, success(data, next_steps(rid, decision["decision"], ref)))
