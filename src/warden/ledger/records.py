"""The exported audit record shapes (one JSON object per JSONL line).

``warden export`` writes, per session, in order::

    {"kind": "session", "session_id", "agent_id", "key_id", "created_at",
     "negotiated"?: {"server_hello": …}, "signature"?: {algorithm, value, key_id}}
    {"kind": "entry", "session_id", "seq", "entry": {… "previous_hash"?, "entry_hash"},
     "response"?: <the signed wire response that published this entry>,
     "request"?: <the canonical JSON text of the request's params>}
    {"kind": "head", "session_id", "seq", "chain_hash", "closed"?: bool,
     "signature": {algorithm, value, key_id}}

and, last, one export-wide manifest::

    {"kind": "manifest", "sessions": [{"session_id", "seq", "chain_hash"}, …],
     "signature": {algorithm, value, key_id}}

signed under a key derived from the IKM with info ``warden:export-manifest``, so
deleting a whole session from an export is detected.

Signatures are HMAC-SHA256 under the session key over the JCS of the record
without its ``signature`` member (:func:`signing_input`):

- The ``session`` record is signed once, when the session is created, so editing
  who the session belongs to (``agent_id``, ``key_id``), when it began or what it
  negotiated is detected. A session record without a signature fails keyed
  verification (``signature_invalid``).
- The ``head`` record is a signed checkpoint, so truncating a session's tail is
  detected even though the deleted responses went with it; it carries the
  session's ``closed`` flag, so reopening a closed session is detected.

``request`` is evidence, not signed: its SHA-256 must equal the entry's hashed
``request_hash``. Members marked ``?`` are absent from older exports, which
still verify (a head without ``closed`` is signed without it; an unsigned session
record verifies only without a key).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

RecordKind = Literal["session", "entry", "head", "manifest"]

#: HKDF info of the export-manifest key (never a session id: those are UUIDs).
MANIFEST_KEY_INFO = "warden:export-manifest"


class SignatureObj(TypedDict):
    algorithm: str
    value: str
    key_id: str


class SessionRecord(TypedDict):
    kind: Literal["session"]
    session_id: str
    agent_id: str
    key_id: str
    created_at: str
    negotiated: NotRequired[dict[str, Any]]
    signature: NotRequired[SignatureObj]


class EntryRecord(TypedDict):
    kind: Literal["entry"]
    session_id: str
    seq: int
    entry: dict[str, Any]
    response: NotRequired[dict[str, Any]]
    request: NotRequired[str]


class HeadRecord(TypedDict):
    kind: Literal["head"]
    session_id: str
    seq: int
    chain_hash: str
    closed: NotRequired[bool]
    signature: SignatureObj


def signing_input(record: SessionRecord | HeadRecord | dict[str, Any]) -> dict[str, Any]:
    """The part of a session, head or manifest record its signature covers."""
    return {k: v for k, v in record.items() if k != "signature"}


def session_signing_input(record: SessionRecord | dict[str, Any]) -> dict[str, Any]:
    """The part of a session record its signature covers."""
    return signing_input(record)


def head_signing_input(record: HeadRecord | dict[str, Any]) -> dict[str, Any]:
    """The part of a head record its signature covers."""
    return signing_input(record)


def manifest_signing_input(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a manifest record its signature covers."""
    return signing_input(record)
