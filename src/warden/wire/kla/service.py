"""What the action request routes do (seed 004: request → decision → approval → audit).

``POST /v1/action-requests`` takes an AI agent action request v1 record and, in order:

1. reads its ``schema_version``: a version Warden does not support is stored as
   received with status ``held_for_review``, chained (``warden/kla.held``) and
   answered ``422 record:unsupported_schema_version``: kept for review, not processed;
2. validates it against the shipped JSON Schema with date-time format checking
   (``400 record:schema_invalid`` with the JSON pointer; nothing is stored);
3. computes its digest (``sha256:`` over the RFC 8785 canonical bytes) and checks a
   detached signature sent beside it (``X-Warden-Signature`` / ``X-Warden-Key-Id``)
   against the verifier-held key registry (``--kla-keys``; ``400
   record:signature_invalid``);
4. a known ``action_request_id``: the same digest from the same principal replays the
   stored answer, anything else is ``409 record:conflict``;
5. asks the Guardian (policy method ``kla/action``), writes the policy decision record
   signed with Warden's key, files an approval task on the desk for
   ``require_approval``, and appends the request and the decision to the execution's
   Warden audit chain, all in one database transaction.

An approver's decision on the desk writes a signed approval event on the same chain,
inside the desk's transaction (:meth:`KlaService.on_desk_transition`). The agent's
outcome report writes the audit event, refused (``409 record:not_authorized``) when it
names a tool call the decision did not allow: after ``block``, or after
``require_approval`` without an approval it consumes then (an approval authorizes one
step only).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from warden.approvals.desk import ApprovalDesk, Approver, AskRequest, DeskTx, Outcome
from warden.approvals.tasks import ApprovalState, Event, Requester, Task, TaskKind
from warden.core.guardian import Guardian
from warden.core.types import ActionRequest, Verdict
from warden.crypto.canonical import canonical_bytes
from warden.errors import IntegrityError, InvalidParams, WardenError
from warden.gates.approval import ask_terms, policy_of
from warden.identity.api_keys import Identity, Role
from warden.kla.digest import record_digest
from warden.kla.keys import KeyRegistry
from warden.kla.records import (
    SCHEMA_VERSION,
    SUPPORTED_SCHEMA_VERSIONS,
    KlaDecision,
    RecordKind,
    SealedRecord,
    kla_decision,
    seal,
    shape_error,
)
from warden.kla.verify import verify_signature
from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import WardenChain
from warden.store.kla_sql import KlaRow, SqlKlaRecords
from warden.wire.kla.evidence import (
    CHAIN_KIND,
    HELD,
    PROCESSED,
    Evidence,
    Signer,
    execution_evidence,
    now_stamp,
)
from warden.wire.kla.models import (
    ActionRequestData,
    EvidenceData,
    KeysData,
    OutcomeData,
    OutcomeRequest,
    RecordData,
    RequestRef,
    StoredRecord,
    SubmitData,
    TaskRef,
)
from warden.wire.spend.models import Resolution
from warden.wire.spend.render import Refusal, retry, success

#: The policy method an action request is decided under (``hooks: [kla/action]``).
METHOD = "kla/action"
WIRE = "kla"
MAX_REASONING = 4096
MAX_ID = 256

_OUTCOMES = {Event.APPROVED: "approve", Event.DENIED: "deny", Event.REROUTED: "re_route"}


class KlaTx(DeskTx, Protocol):
    """One store write transaction as the action request wire uses it."""

    @property
    def kla(self) -> SqlKlaRecords: ...


class KlaStore(Protocol):
    def transaction(self) -> AbstractContextManager[KlaTx]: ...

    def iter_records(self, session_id: str | None = None) -> Iterator[dict[str, Any]]: ...


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


def not_authorized(message: str, resolution: Resolution | None = None) -> Refusal:
    return Refusal("record:not_authorized", 409, message, resolution=resolution)


def _held_refusal(row: KlaRow, version: str) -> Refusal:
    supported = ", ".join(sorted(SUPPORTED_SCHEMA_VERSIONS[RecordKind.ACTION_REQUEST]))
    return Refusal(
        "record:unsupported_schema_version",
        422,
        f"schema_version {version!r:.40} is not supported (supported: {supported}): the "
        f"record is stored for review as {row.record_id} (digest {row.digest}) and was not "
        "processed: no decision was made",
        resolution=retry(f'send the request as schema_version "{SCHEMA_VERSION}"'),
    )


# -- helpers ------------------------------------------------------------------------------


def _usable_id(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID else None


def _canonical_text(record: Any) -> str:
    return canonical_bytes(record).decode("utf-8")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def stored(row: KlaRow) -> StoredRecord:
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


def _args(record: dict[str, Any]) -> dict[str, str]:
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


@dataclass
class _Trail:
    """The stored records of one action request."""

    request: KlaRow
    decision: KlaRow | None
    approvals: list[KlaRow]
    audit: KlaRow | None

    @classmethod
    def of(cls, rows: list[KlaRow], rid: str) -> _Trail | None:
        request = next((r for r in rows if r.kind == "action_request" and r.record_id == rid), None)
        if request is None:
            return None
        return cls(
            request,
            next((r for r in rows if r.kind == "policy_decision"), None),
            [r for r in rows if r.kind == "approval_event"],
            next((r for r in rows if r.kind == "audit_event"), None),
        )

    def approval(self) -> tuple[KlaRow, dict[str, Any]] | None:
        """The approval event that stands: the approve, else the deny, else the last
        re-route (a task is approved or denied once; it may be re-routed several times)."""
        events = [(r, r.value()) for r in self.approvals]
        for outcome in ("approve", "deny", "re_route"):
            found = [e for e in events if e[1]["outcome"] == outcome]
            if found:
                return found[-1]
        return None


class KlaService:
    """The routes' shared state: store, Guardian, desk, chain, Warden's key, the registry
    of trusted agent keys, and the clock (the desk's by default)."""

    def __init__(
        self,
        store: KlaStore,
        guardian: Guardian,
        desk: ApprovalDesk,
        ledger: Ledger,
        signer: Signer,
        registry: KeyRegistry | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.guardian = guardian
        self.desk = desk
        self.signer = signer
        self.registry = registry
        self._clock = clock
        self.chain = WardenChain(
            ledger,
            CHAIN_KIND,
            lambda: self.now(),
            negotiated=lambda name: (
                {"kind": "kla_execution", "execution_id": name} if name else {"kind": "kla_review"}
            ),
        )

    def now(self) -> datetime:
        return self._clock() if self._clock is not None else self.desk.now()

    # -- submit -----------------------------------------------------------------------------

    def submit(self, body: Any, signature: str | None, kid: str | None, who: Identity) -> Answer:
        """``POST /v1/action-requests`` (the steps in the module docstring)."""
        if not isinstance(body, dict):
            raise schema_invalid("", "an action request is one JSON object")
        version = body.get("schema_version")
        if not isinstance(version, str):
            raise schema_invalid("/schema_version", "schema_version is required (a string)")
        held = version not in SUPPORTED_SCHEMA_VERSIONS[RecordKind.ACTION_REQUEST]
        if not held:
            err = shape_error(body, RecordKind.ACTION_REQUEST)
            if err is not None:
                raise schema_invalid(*err)
        try:
            digest = record_digest(body)
            text = _canonical_text(body)
        except WardenError as exc:
            raise Refusal(
                "input:invalid_json",
                400,
                f"the record cannot be canonicalized (RFC 8785): {exc.message}",
                resolution=retry("send numbers within IEEE 754 range and valid Unicode"),
            ) from exc
        self._check_signature(digest, signature, kid)
        if held:
            self._hold(body, version, digest, text, signature, kid, who)
        return self._process(body, digest, text, signature, kid, who)

    def _check_signature(self, digest: str, signature: str | None, kid: str | None) -> None:
        if signature is None and kid is None:
            return
        if signature is None:
            raise signature_invalid("X-Warden-Key-Id was sent without X-Warden-Signature")
        if self.registry is None:
            raise signature_invalid(
                "the request is signed but this Warden holds no key registry to check it "
                "against (start it with --kla-keys)"
            )
        if kid is None:
            raise signature_invalid("a signature needs its X-Warden-Key-Id")
        if kid not in self.registry:
            raise signature_invalid(f"kid {kid!r:.80} is not in Warden's key registry")
        if not verify_signature(self.registry.get_key(kid), digest, signature):
            raise signature_invalid(
                f"the Ed25519 signature does not verify over {digest} with key {kid!r:.80}"
            )

    def _hold(
        self,
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
            created_at=now_stamp(self.now()),
        )
        with self.store.transaction() as tx:
            existing = tx.kla.get(row.record_id)
            if existing is None:
                tx.kla.insert(row)
                self._chain(tx, row, body, event="held")
                stored_row = row
            elif (
                existing.status == HELD
                and existing.digest == digest
                and existing.principal == who.principal
            ):
                stored_row = existing
            else:
                raise self._taken(row.record_id)
        raise _held_refusal(stored_row, version)

    @staticmethod
    def _taken(rid: str) -> Refusal:
        return conflict(
            f"action_request_id {rid!r:.80} is already taken by a different record; nothing "
            "was stored",
            "a new request needs a new action_request_id; resubmitting the same record "
            "(same bytes after RFC 8785) replays its answer",
        )

    def _process(
        self,
        record: dict[str, Any],
        digest: str,
        text: str,
        signature: str | None,
        kid: str | None,
        who: Identity,
    ) -> Answer:
        rid: str = record["action_request_id"]
        execution: str = record["correlation"]["execution_id"]
        with self.store.transaction() as tx:
            existing = tx.kla.get(rid)
            if existing is not None:
                if (
                    existing.kind != RecordKind.ACTION_REQUEST.value
                    or existing.principal != who.principal
                    or existing.digest != digest
                ):
                    raise self._taken(rid)
                if existing.status == HELD:  # pragma: no cover - a held record differs
                    raise self._taken(rid)
                trail = _Trail.of(tx.kla.for_request(rid), rid)
                assert trail is not None and trail.decision is not None
                filed = self._task(tx, trail.decision.value().get("task_id"))
                answer = self._submitted(trail.request, trail.decision, filed)
                answer.body["replayed"] = True
                return answer
            now = self.now()
            stamp = now_stamp(now)
            verdict = self.guardian.decide(self._action_request(record, who))
            decision = kla_decision(verdict.decision, warn=verdict.warn)
            decision_id = _new_id("pd")
            task: Task | None = None
            if decision is KlaDecision.REQUIRE_APPROVAL:
                ask = self._ask(record, digest, decision_id, who, verdict)
                resolution = self.desk.resolve(
                    tx, ask, {"wire": WIRE, "action_request_id": rid, "key_id": who.key_id}
                )
                task = resolution.task
            decision_record = self._decision_record(
                record, digest, decision_id, decision, verdict, task, stamp
            )
            sealed = self._seal(RecordKind.POLICY_DECISION, decision_record)
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
            decision_row = self._row(sealed, rid, execution, who.principal, stamp)
            for row, value in ((request_row, record), (decision_row, decision_record)):
                tx.kla.insert(row)
                self._chain(tx, row, value, event=row.kind)
            return self._submitted(request_row, decision_row, task)

    def _action_request(self, record: dict[str, Any], who: Identity) -> ActionRequest:
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
            args=_args(record),
            raw_command="",
            session={"id": execution, "agent_id": who.principal, "step_count": 0},
        )

    def _ask(
        self,
        record: dict[str, Any],
        digest: str,
        decision_id: str,
        who: Identity,
        verdict: Verdict | None,
        *,
        requester: str | None = None,
        cited_task_id: str | None = None,
    ) -> AskRequest:
        """The desk request of a require_approval decision; rebuilt identically (same
        action, hence the same action hash) to consume the approval at the outcome."""
        rid = record["action_request_id"]
        execution = record["correlation"]["execution_id"]
        principal = requester or who.principal
        arguments = {"action_request_id": rid, "action_request_digest": digest, **_args(record)}
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
            ask_terms(self.guardian, verdict)
            if verdict is not None
            else {"approver_group": "", "question": "", "timeout_s": 0.0}
        )
        return AskRequest(
            kind=TaskKind.ACTION_REQUEST,
            wire=WIRE,
            scope=f"kla:{execution}",
            action={"method": METHOD, "name": record["action"], "arguments": arguments},
            requester=Requester(agent_id=principal, principal=principal),
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

    def _decision_record(
        self,
        record: dict[str, Any],
        digest: str,
        decision_id: str,
        decision: KlaDecision,
        verdict: Verdict,
        task: Task | None,
        stamp: str,
    ) -> dict[str, Any]:
        bundle = verdict.bundle or self.guardian.engine.bundle.ref
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

    def _seal(self, kind: RecordKind, record: dict[str, Any]) -> SealedRecord:
        return seal(kind, record, private_key=self.signer.key, kid=self.signer.kid)

    @staticmethod
    def _row(sealed: SealedRecord, rid: str, execution: str, principal: str, stamp: str) -> KlaRow:
        return KlaRow(
            record_id=sealed.record[sealed.kind.id_field],
            kind=sealed.kind.value,
            action_request_id=rid,
            execution_id=execution,
            principal=principal,
            digest=sealed.digest,
            record=_canonical_text(sealed.record),
            signature=sealed.signature,
            kid=sealed.kid,
            status=PROCESSED,
            created_at=stamp,
        )

    def _chain(self, tx: KlaTx, row: KlaRow, value: Any, *, event: str) -> None:
        """Append ``warden/kla.<event>`` carrying the record to its execution's chain
        (records held for review without a usable execution_id: the review chain ``""``)."""
        detail: dict[str, Any] = {
            "record_id": row.record_id,
            "kind": row.kind,
            "digest": row.digest,
            "status": row.status,
            "principal": row.principal,
            "record": value,
        }
        if row.signature is not None:
            detail["signature"] = row.signature
            detail["kid"] = row.kid
        self.chain.append(tx, row.execution_id or "", event, f"{event}:{row.record_id}", detail)

    def _task(self, tx: KlaTx, task_id: Any) -> Task | None:
        return tx.tasks.get(task_id) if isinstance(task_id, str) else None

    def _task_ref(self, task: Task | None) -> TaskRef | None:
        if task is None:
            return None
        return TaskRef(id=task.id, state=task.state.value, url=self.desk.task_url(task.id))

    def _submitted(self, request: KlaRow, decision_row: KlaRow, task: Task | None) -> Answer:
        decision = decision_row.value()
        rid = request.record_id
        data = SubmitData(
            action_request=RequestRef(id=rid, digest=request.digest, status="processed"),
            decision=decision,
            decision_digest=decision_row.digest,
            decision_signature=decision_row.signature or "",
            kid=decision_row.kid or "",
        )
        ref = self._task_ref(task)
        if ref is not None:
            data.task = ref
        return Answer(200, success(data, self._next(rid, decision["decision"], ref)))

    @staticmethod
    def _next(rid: str, decision: str, task: TaskRef | None) -> list[str]:
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

    # -- approvals --------------------------------------------------------------------------

    def on_desk_transition(
        self, tx: DeskTx, task: Task, event: Event, by: Approver | None, reason: str
    ) -> None:
        """A desk listener for :attr:`TaskKind.ACTION_REQUEST`: an approver's approve, deny
        or re-route writes a signed approval event, chained on the execution's chain, in
        the desk's transaction (votes short of N-of-M, expiry and consumption write none)."""
        outcome = _OUTCOMES.get(event)
        if outcome is None or by is None:
            return
        ktx = cast(KlaTx, tx)
        decision_row = ktx.kla.get(str(task.detail.get("policy_decision_id", "")))
        if decision_row is None:  # pragma: no cover - filed with its decision, one transaction
            raise WardenError(f"task {task.id} names no stored policy decision")
        decision = decision_row.value()
        stamp = now_stamp(self.now())
        record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "approval_event_id": _new_id("ae"),
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
        sealed = self._seal(RecordKind.APPROVAL_EVENT, record)
        row = self._row(
            sealed,
            decision["action_request_id"],
            decision["correlation"]["execution_id"],
            decision_row.principal,
            stamp,
        )
        ktx.kla.insert(row)
        self._chain(ktx, row, record, event=row.kind)

    # -- outcome ----------------------------------------------------------------------------

    def outcome(self, rid: str, body: OutcomeRequest, who: Identity) -> Answer:
        """``POST /v1/action-requests/{id}/outcome``: the audit event (module docstring)."""
        with self.store.transaction() as tx:
            trail = _Trail.of(tx.kla.for_request(rid), rid)
            if trail is None or trail.request.principal != who.principal:
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
                answer = self._audited(trail.audit)
                answer.body["replayed"] = True
                return answer
            decision = trail.decision.value()
            standing = trail.approval()
            if body.tool_call is not None:
                self._authorize(tx, trail, decision, standing, who)
            else:
                self._consistent(tx, trail, decision, standing, wanted["outcome"]["status"])
            stamp = now_stamp(self.now())
            record: dict[str, Any] = {
                "schema_version": SCHEMA_VERSION,
                "audit_event_id": _new_id("au"),
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
                sealed = self._seal(RecordKind.AUDIT_EVENT, record)
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
            row = self._row(
                sealed, rid, decision["correlation"]["execution_id"], who.principal, stamp
            )
            tx.kla.insert(row)
            self._chain(tx, row, record, event=row.kind)
            return self._audited(row)

    def _authorize(
        self,
        tx: KlaTx,
        trail: _Trail,
        decision: dict[str, Any],
        standing: tuple[KlaRow, dict[str, Any]] | None,
        who: Identity,
    ) -> None:
        """The control rule: no tool effect after block, nor after require_approval
        without an approval (consumed now: an approval authorizes one step only)."""
        rid = trail.request.record_id
        kind = decision["decision"]
        if kind == KlaDecision.BLOCK:
            raise not_authorized(
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
            raise not_authorized(
                f"action request {rid} needs an approval before any tool call and is {state}",
                Resolution(type="human_approval", taskId=task_id)
                if isinstance(task_id, str) and state != "denied"
                else None,
            )
        ask = self._ask(
            trail.request.value(),
            trail.request.digest,
            decision["policy_decision_id"],
            who,
            None,
            requester=trail.request.principal,
            cited_task_id=task_id if isinstance(task_id, str) else "(none)",
        )
        resolution = self.desk.resolve(
            tx,
            ask,
            {
                "wire": WIRE,
                "route": "POST /v1/action-requests/{id}/outcome",
                "action_request_id": rid,
            },
        )
        if resolution.outcome is not Outcome.GRANTED:
            raise not_authorized(
                f"the approval of action request {rid} cannot be used: {resolution.text}"
            )

    def _consistent(
        self,
        tx: KlaTx,
        trail: _Trail,
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
        task = self._task(tx, decision.get("task_id"))
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
                and task.expires_at <= self.desk.now()
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
            raise not_authorized(
                f"an outcome {status!r} contradicts action request {rid}'s record "
                f"(decision {kind}"
                + (", awaiting approval" if pending else "")
                + (f", approval {standing[1]['outcome']}" if standing is not None else "")
                + ")"
            )
        if status == "cancelled" and pending and task is not None:
            # The agent gives up: the approvers' task is withdrawn (chained on the desk).
            self.desk.cancel(tx, task, "the agent cancelled the action request")

    def _audited(self, row: KlaRow) -> Answer:
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

    # -- reads ------------------------------------------------------------------------------

    @staticmethod
    def _visible(row: KlaRow, who: Identity) -> bool:
        """Approvers and admins read every record; an agent only its own (another's reads
        as absent)."""
        return who.may(Role.APPROVER) or row.principal == who.principal

    def get_request(self, rid: str, who: Identity) -> Answer:
        with self.store.transaction() as tx:
            trail = _Trail.of(tx.kla.for_request(rid), rid)
            if trail is None or not self._visible(trail.request, who):
                raise not_found(f"action request {rid!r:.80}")
            decision = trail.decision.value() if trail.decision is not None else None
        task_id = decision.get("task_id") if decision is not None else None
        task = self.desk.get(task_id) if isinstance(task_id, str) else None  # expired if due
        data = ActionRequestData(
            status=self._status(trail, decision, task),
            action_request=stored(trail.request),
            approval_events=[stored(r) for r in trail.approvals],
        )
        # Members that do not apply are left out (not null).
        if trail.decision is not None:
            data.decision = stored(trail.decision)
        if trail.audit is not None:
            data.audit_event = stored(trail.audit)
        ref = self._task_ref(task)
        if ref is not None:
            data.task = ref
        steps = ["GET /v1/kla-records/{id} reads one record by id"]
        if trail.request.execution_id is not None and trail.request.status == PROCESSED:
            steps.append(
                f"GET /v1/executions/{trail.request.execution_id}/evidence exports the bundle"
            )
        if decision is not None and trail.audit is None:
            steps.insert(0, self._next(rid, decision["decision"], ref)[0])
        return Answer(200, success(data, steps))

    @staticmethod
    def _status(trail: _Trail, decision: dict[str, Any] | None, task: Task | None) -> str:
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

    def get_record(self, record_id: str, who: Identity) -> Answer:
        with self.store.transaction() as tx:
            row = tx.kla.get(record_id)
        if row is None or not self._visible(row, who):
            raise not_found(f"KLA record {record_id!r:.80}")
        steps = [
            "warden verify-record FILE --digest <digest> --signature <signature> "
            "--public-key <GET /v1/keys as a file> --kid <kid> checks it offline"
        ]
        if row.action_request_id is not None:
            steps.append(f"GET /v1/action-requests/{row.action_request_id} shows its trail")
        return Answer(200, success(RecordData(record=stored(row)), steps))

    def evidence_of(self, execution_id: str, who: Identity) -> Evidence:
        """The evidence of one execution, as far as ``who`` may read it. A records table
        that disagrees with the audit chain is ``500 evidence:integrity_failed``: nothing
        the chain does not vouch for is signed."""
        try:
            ev = execution_evidence(
                self.store,
                execution_id,
                self.signer,
                self.registry,
                lambda row: self._visible(row, who),
            )
        except IntegrityError as exc:
            raise Refusal("evidence:integrity_failed", 500, exc.message) from exc
        if ev is None:
            raise not_found(f"processed action request in execution {execution_id!r:.80}")
        return ev

    def evidence(self, execution_id: str, who: Identity) -> Answer:
        ev = self.evidence_of(execution_id, who)
        data = EvidenceData(
            manifest=ev.manifest(self.signer, now_stamp(self.now())),
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

    def keys(self) -> Answer:
        return Answer(
            200,
            success(
                KeysData(keys=self.signer.jwks()["keys"]),
                [
                    "Save this JWKS and verify Warden's records offline: warden verify-record "
                    "FILE --digest … --signature … --public-key jwks.json --kid <kid>",
                    "GET /v1/executions/{execution_id}/evidence exports an evidence bundle",
                ],
            ),
        )
