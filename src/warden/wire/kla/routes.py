"""The action request routes (``/v1``): AI agent action requests and their records.

Same envelope and authentication as the rest of ``/v1`` (seed ``003_…``). Writing needs
an ``agent`` (or ``admin``) key, reading any key; an agent reads only what its principal
submitted (others' records read as 404), approvers and admins read every record.

- ``POST /v1/action-requests``: submit (body: the record, as application/json; optional
  signature in ``X-Warden-Signature`` with ``X-Warden-Key-Id``, each sent at most once);
- ``GET /v1/action-requests/{id}``: the request and every record after it;
- ``POST /v1/action-requests/{id}/outcome``: the audit event;
- ``GET /v1/kla-records/{record_id}``: one record by id, any kind;
- ``GET /v1/executions/{execution_id}/evidence``: an evidence bundle;
- ``GET /v1/keys``: Warden's public signing keys (JWKS).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Security
from fastapi.responses import Response
from fastapi.security import HTTPBearer

from warden.core.media import json_media_problem
from warden.identity.api_keys import ApiKeys, Role
from warden.wire.kla.answers import Answer
from warden.wire.kla.models import (
    ACTION_REQUEST_BODY,
    ActionRequestData,
    EvidenceData,
    KeysData,
    OutcomeData,
    OutcomeRequest,
    RecordData,
    SubmitData,
)
from warden.wire.kla.service import KlaService
from warden.wire.spend.auth import KeyAuth, caller, checks_caller_in_transaction
from warden.wire.spend.models import ErrorEnvelope, Success
from warden.wire.spend.render import invalid, json_response
from warden.wire.spend.routes import PREFIX, RawBody, make_route_class

_ERRORS: dict[int | str, dict[str, object]] = {
    "4XX": {"model": ErrorEnvelope, "description": "Refused: blockedBy names the gate"},
    "5XX": {"model": ErrorEnvelope, "description": "Warden could not complete the request"},
}

Signature = Annotated[
    str | None,
    Header(
        alias="X-Warden-Signature",
        description="Detached Ed25519 signature over the 32 raw bytes of the record's sha256 "
        "digest (RFC 8785 canonical form), base64url without padding (86 characters).",
    ),
]
#: Whose record an approver or admin reads when several principals used the id.
Principal = Annotated[str | None, Query(max_length=256)]
KeyId = Annotated[
    str | None,
    Header(alias="X-Warden-Key-Id", description="The signing key's kid in --kla-keys."),
]


async def _one_signature(request: Request) -> None:
    """Refused (``400 input:invalid``) before the body is read: a body not sent as JSON
    (decision 993), two ``X-Warden-Signature`` or ``X-Warden-Key-Id`` headers (ambiguous)."""
    if problem := json_media_problem(request.headers.get("content-type")):
        raise invalid(f"{problem}; nothing was stored", hint="send it as application/json")
    for name in ("X-Warden-Signature", "X-Warden-Key-Id"):
        if len(request.headers.getlist(name)) > 1:
            raise invalid(
                f"send one {name} header, not several; nothing was stored",
                hint=f"send the request again with a single {name} header",
            )


def _send(answer: Answer) -> Response:
    return json_response(answer.status, answer.body)


def kla_router(service: KlaService, keys: ApiKeys, *, max_body_bytes: int = 1 << 20) -> APIRouter:
    """The action request routes, in the OpenAPI document (include before the spend
    router, whose catch-all answers unknown ``/v1`` routes)."""
    auth = KeyAuth(keys)
    security = [Security(HTTPBearer(auto_error=False, description="An API key"))]
    write = APIRouter(
        prefix=PREFIX,
        tags=["action requests"],
        route_class=make_route_class(auth, max_body_bytes, role=Role.AGENT),
        responses=_ERRORS,
        dependencies=security,
    )
    read = APIRouter(
        prefix=PREFIX,
        tags=["action requests"],
        route_class=make_route_class(auth, max_body_bytes, any_role=True),
        responses=_ERRORS,
        dependencies=security,
    )

    @write.post(
        "/action-requests",
        response_model=Success[SubmitData],
        summary="Submit an AI agent action request v1: validated, digested, decided by "
        "policy, routed to the approval desk when it needs a human, chained",
        openapi_extra={"requestBody": ACTION_REQUEST_BODY},
        dependencies=[Depends(_one_signature)],
    )
    @checks_caller_in_transaction
    def submit_action_request(
        raw: RawBody, signature: Signature = None, key_id: KeyId = None
    ) -> Response:
        return _send(service.submit(raw, signature, key_id, caller()))

    @write.post(
        "/action-requests/{action_request_id}/outcome",
        response_model=Success[OutcomeData],
        summary="Record what happened (tool call and outcome digests): the audit event",
    )
    def record_outcome(action_request_id: str, raw: RawBody, body: OutcomeRequest) -> Response:
        return _send(service.outcome(action_request_id, body, caller()))

    @read.get(
        "/action-requests/{action_request_id}",
        response_model=Success[ActionRequestData],
        summary="Read an action request, its decision, approval events and audit event",
    )
    def get_action_request(action_request_id: str, principal: Principal = None) -> Response:
        return _send(service.get_request(action_request_id, caller(), principal))

    @read.get(
        "/kla-records/{record_id}",
        response_model=Success[RecordData],
        summary="Read one KLA record by id (request, decision, approval or audit event)",
    )
    def get_kla_record(record_id: str, principal: Principal = None) -> Response:
        return _send(service.get_record(record_id, caller(), principal))

    @read.get(
        "/executions/{execution_id}/evidence",
        response_model=Success[EvidenceData],
        summary="Export the evidence bundle of one execution (records, chain head, keys)",
    )
    def get_evidence(execution_id: str, principal: Principal = None) -> Response:
        return _send(service.evidence(execution_id, caller(), principal))

    @read.get(
        "/keys",
        response_model=Success[KeysData],
        summary="Warden's public Ed25519 signing keys (JWKS) for verifying its records",
    )
    def get_keys() -> Response:
        return _send(service.keys())

    both = APIRouter()
    both.include_router(write)
    both.include_router(read)
    return both


__all__ = ["kla_router"]
