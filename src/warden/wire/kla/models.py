"""Request bodies and response data of the action request wire (``/v1/action-requests``).

The action request itself is not a pydantic model: it is validated against the shipped
JSON Schema (``warden/schemas/kla/action-request.json``) and hashed exactly as received,
so it is read as a strictly parsed JSON value. Member names are snake_case, as in the
KLA records; the envelope around them is the ``/v1`` one (``{data, nextActions}``,
``{blockedBy, …}``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

Digest = Annotated[
    StrictStr,
    Field(pattern=r"^sha256:[0-9a-f]{64}$", examples=["sha256:" + "0" * 63 + "1"]),
]

#: The OpenAPI description of the submit body (validated by the JSON Schema, not pydantic).
ACTION_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "An AI agent action request v1 record, exactly as the agent "
                "signs and keeps it: https://warden.dev/schemas/kla/v1/action-request.json "
                "(shipped in warden/schemas/kla/). Strict JSON: duplicate keys are refused.",
            }
        }
    },
}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Request):
    """The tool call that carried out the action: its name and the digest of its parameters."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    params_digest: Digest


class OutcomeStatus(_Request):
    """What happened; ``result_digest`` is the digest of the tool result, never the result."""

    status: Literal["succeeded", "failed", "blocked", "denied", "expired", "cancelled"]
    result_digest: Digest | None = None


class OutcomeRequest(_Request):
    """The agent's report after the decision: the tool call (if it ran) and its outcome."""

    tool_call: ToolCall | None = None
    outcome: OutcomeStatus


class RequestRef(BaseModel):
    id: str
    digest: str
    status: Literal["processed", "held_for_review"]


class TaskRef(BaseModel):
    """The approval task of a require_approval decision."""

    id: str
    state: str
    url: str | None = None


class SubmitData(BaseModel):
    """A processed action request: its digest and the policy decision record."""

    action_request: RequestRef
    decision: dict[str, Any] = Field(
        description="The policy decision record (policy-decision.json), signed by Warden."
    )
    decision_digest: str
    decision_signature: str = Field(
        description="Ed25519 over the 32 bytes of decision_digest, base64url without padding "
        "(ML-DSA-65 when evidence_signing_keys names only ml-dsa-65)."
    )
    kid: str = Field(description="The key id of Warden's signing key (GET /v1/keys).")
    task: TaskRef | None = None


class StoredRecord(BaseModel):
    """One KLA record as Warden stores it: the record, its digest and detached signature."""

    id: str
    kind: str
    record: dict[str, Any]
    digest: str
    signature: str | None = None
    kid: str | None = None
    status: Literal["processed", "held_for_review"]
    action_request_id: str | None = None
    execution_id: str | None = None
    created_at: str


class ActionRequestData(BaseModel):
    """An action request and every record that followed it."""

    status: str = Field(
        description="held_for_review, allowed, blocked, awaiting_approval, approved, denied, "
        "expired or completed (an audit event is recorded)."
    )
    action_request: StoredRecord
    decision: StoredRecord | None = None
    approval_events: list[StoredRecord] = Field(default_factory=list)
    audit_event: StoredRecord | None = None
    task: TaskRef | None = None


class RecordData(BaseModel):
    record: StoredRecord


class OutcomeData(BaseModel):
    """The audit event that ties request, decision, approval, tool call and outcome."""

    audit_event: StoredRecord


class EvidenceData(BaseModel):
    """An evidence bundle: write ``manifest`` to manifest.json, each of ``records`` as one
    line of records.jsonl and ``keys`` to keys/jwks.json, then ``warden verify-bundle``."""

    manifest: dict[str, Any]
    records: list[dict[str, Any]]
    keys: dict[str, Any]
    held_for_review: list[str] = Field(
        default_factory=list,
        description="Ids of records of this execution stored for review (an unsupported "
        "schema_version) and left out of the bundle.",
    )


class KeysData(BaseModel):
    """A JWKS (RFC 7517, RFC 8037 OKP keys): Warden's public signing keys."""

    keys: list[dict[str, str]]
