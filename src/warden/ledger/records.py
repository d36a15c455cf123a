"""The exported audit record shapes (one JSON object per JSONL line).

``warden export`` writes, per session, in order::

    {"kind": "session", "session_id", "agent_id", "key_id", "created_at"}
    {"kind": "entry", "session_id", "seq", "entry": {… "previous_hash"?, "entry_hash"},
     "response": <the signed wire response that published this entry, or absent>}
    {"kind": "head", "session_id", "seq", "chain_hash", "signature": {algorithm, value, key_id}}

and, last, one export-wide manifest::

    {"kind": "manifest", "sessions": [{"session_id", "seq", "chain_hash"}, …],
     "signature": {algorithm, value, key_id}}

signed under a key derived from the IKM with info ``warden:export-manifest``, so
deleting a whole session from an export is detected.

The ``head`` record is a signed checkpoint (HMAC under the session key over the
JCS of the record without ``signature``) so that truncating a session's tail is
detected even though the deleted responses went with it.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

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


class _EntryRecordBase(TypedDict):
    kind: Literal["entry"]
    session_id: str
    seq: int
    entry: dict[str, Any]


class EntryRecord(_EntryRecordBase, total=False):
    response: dict[str, Any]


class HeadRecord(TypedDict):
    kind: Literal["head"]
    session_id: str
    seq: int
    chain_hash: str
    signature: SignatureObj


def head_signing_input(record: HeadRecord | dict[str, Any]) -> dict[str, Any]:
    """The part of a head record its signature covers."""
    return {k: v for k, v in record.items() if k != "signature"}


def manifest_signing_input(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a manifest record its signature covers."""
    return {k: v for k, v in record.items() if k != "signature"}
