"""Offline verification of exported audit chains (ACS spec §8.2, §8.6, §10).

Importable without the server or the store: it takes JSONL records (see
:mod:`warden.ledger.records`) and, optionally, the IKM to check HMAC
signatures. It walks every session in order and raises
:class:`~warden.errors.IntegrityError` at the first broken record, naming the
session, the sequence number and the reason:

1. ``chain_mismatch``        seq gap/duplicate, wrong ``previous_hash`` link,
                             response ``chain_hash`` or signed head ≠ recomputed head
2. ``record_hash_mismatch``  recomputed ``entry_hash`` ≠ stored one
3. ``signature_invalid``     a response or head signature does not verify

It never mutates the records it reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import SessionKeys, derive_session_key, hmac_verify
from warden.errors import IntegrityError, IntegrityReason, WardenError
from warden.ledger.chain import compute_entry_hash, entry_content
from warden.ledger.records import MANIFEST_KEY_INFO, head_signing_input, manifest_signing_input

_SIGNED_RESULT_KEYS = ("result", "error")


@dataclass
class VerifyReport:
    """Summary of a clean verification."""

    sessions: int = 0
    entries: int = 0
    signatures_checked: int = 0
    heads: dict[str, str] = field(default_factory=dict)


@dataclass
class _SessionWalk:
    session_id: str
    seq: int = -1
    head: str | None = None
    saw_head: bool = False


def _fail(reason: IntegrityReason, msg: str, session_id: str, seq: int | None) -> IntegrityError:
    where = f"session {session_id}" + (f" entry seq {seq}" if seq is not None else "")
    return IntegrityError(f"{where}: {msg}", reason=reason, session_id=session_id, seq=seq)


def _check_signature(
    keys: SessionKeys | None,
    session_id: str,
    signed_obj: dict[str, Any],
    envelope_for_input: dict[str, Any],
    seq: int | None,
) -> bool:
    if keys is None:
        return False
    sig = signed_obj.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("value"), str):
        raise _fail(IntegrityReason.SIGNATURE_INVALID, "signature missing", session_id, seq)
    try:
        message = canonical_bytes(envelope_for_input)
    except WardenError as exc:
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID, f"cannot canonicalize: {exc}", session_id, seq
        ) from exc
    if not hmac_verify(keys.key_for(session_id), message, sig["value"]):
        raise _fail(IntegrityReason.SIGNATURE_INVALID, "signature does not verify", session_id, seq)
    return True


def _response_signing_input(response: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    for key in _SIGNED_RESULT_KEYS:
        inner = response.get(key)
        if isinstance(inner, dict):
            stripped = dict(response)
            stripped[key] = {k: v for k, v in inner.items() if k != "signature"}
            return inner, stripped
    raise ValueError("response has neither result nor error")


def verify_records(
    records: Iterable[dict[str, Any]],
    *,
    ikm: bytes | None = None,
    require_manifest: bool = False,
) -> VerifyReport:
    """Verify exported records; return a summary or raise :class:`IntegrityError`.

    ``ikm`` enables HMAC checks of every response and signed head; without it
    only hashes and links are checked (``signatures_checked`` stays 0).
    ``require_manifest`` (for export files) demands the closing signed manifest
    and checks that it lists exactly the sessions and heads found.
    """
    keys = SessionKeys(ikm) if ikm is not None else None
    report = VerifyReport()
    walks: dict[str, _SessionWalk] = {}

    def close(walk: _SessionWalk) -> None:
        if walk.seq >= 0 and not walk.saw_head:
            raise _fail(
                IntegrityReason.CHAIN_MISMATCH,
                "no signed head record after the last entry (truncated export?)",
                walk.session_id,
                None,
            )
        if walk.head is not None:
            report.heads[walk.session_id] = walk.head

    manifest: dict[str, Any] | None = None
    for rec in records:
        kind = rec.get("kind")
        sid = str(rec.get("session_id", ""))
        if manifest is not None:
            raise _fail(IntegrityReason.CHAIN_MISMATCH, "records after the manifest", sid, None)
        if kind == "manifest":
            manifest = rec
            continue
        if kind == "session":
            if sid in walks:
                raise _fail(IntegrityReason.CHAIN_MISMATCH, "session listed twice", sid, None)
            walks[sid] = _SessionWalk(sid)
            report.sessions += 1
            continue
        walk = walks.get(sid)
        if walk is None:
            raise _fail(
                IntegrityReason.CHAIN_MISMATCH, f"{kind} record before its session", sid, None
            )
        if kind == "entry":
            report.signatures_checked += _verify_entry(rec, walk, keys)
            report.entries += 1
        elif kind == "head":
            seq = rec.get("seq")
            if walk.saw_head:
                raise _fail(IntegrityReason.CHAIN_MISMATCH, "second head record", sid, None)
            if seq != walk.seq or rec.get("chain_hash") != walk.head:
                raise _fail(
                    IntegrityReason.CHAIN_MISMATCH,
                    f"signed head (seq {seq}, {rec.get('chain_hash')}) does not match the "
                    f"recomputed head (seq {walk.seq}, {walk.head})",
                    sid,
                    None,
                )
            report.signatures_checked += _check_signature(
                keys, sid, rec, head_signing_input(rec), None
            )
            walk.saw_head = True
        else:
            raise _fail(IntegrityReason.CHAIN_MISMATCH, f"unknown record kind {kind!r}", sid, None)
    for walk in walks.values():
        close(walk)
    if manifest is not None:
        report.signatures_checked += _verify_manifest(manifest, report.heads, walks, ikm)
    elif require_manifest:
        raise IntegrityError(
            "no signed manifest at the end of the export (truncated file?)",
            reason=IntegrityReason.CHAIN_MISMATCH,
        )
    return report


def _verify_manifest(
    manifest: dict[str, Any],
    heads: dict[str, str],
    walks: dict[str, _SessionWalk],
    ikm: bytes | None,
) -> int:
    listed = manifest.get("sessions")
    if not isinstance(listed, list):
        raise IntegrityError("manifest has no session list", reason=IntegrityReason.CHAIN_MISMATCH)
    expected = {sid: (walk.seq, walk.head) for sid, walk in walks.items()}
    found: dict[str, tuple[Any, Any]] = {}
    for item in listed:
        if not isinstance(item, dict):
            raise IntegrityError(
                "manifest entry is not an object", reason=IntegrityReason.CHAIN_MISMATCH
            )
        found[str(item.get("session_id"))] = (item.get("seq"), item.get("chain_hash"))
    for sid in sorted(set(found) | set(expected)):
        if sid not in expected:
            raise IntegrityError(
                f"session {sid}: listed in the manifest but missing from the export",
                reason=IntegrityReason.CHAIN_MISMATCH,
                session_id=sid,
            )
        if sid not in found:
            raise IntegrityError(
                f"session {sid}: in the export but not in the manifest",
                reason=IntegrityReason.CHAIN_MISMATCH,
                session_id=sid,
            )
        if found[sid] != expected[sid]:
            raise IntegrityError(
                f"session {sid}: manifest head {found[sid]} differs from the export's "
                f"{expected[sid]}",
                reason=IntegrityReason.CHAIN_MISMATCH,
                session_id=sid,
            )
    if ikm is None:
        return 0
    sig = manifest.get("signature")
    try:
        message = canonical_bytes(manifest_signing_input(manifest))
    except WardenError as exc:
        raise IntegrityError(
            f"manifest cannot be canonicalized: {exc}", reason=IntegrityReason.SIGNATURE_INVALID
        ) from exc
    key = derive_session_key(ikm, MANIFEST_KEY_INFO)
    if not (
        isinstance(sig, dict)
        and isinstance(sig.get("value"), str)
        and hmac_verify(key, message, sig["value"])
    ):
        raise IntegrityError(
            "manifest signature does not verify", reason=IntegrityReason.SIGNATURE_INVALID
        )
    return 1


def _verify_entry(rec: dict[str, Any], walk: _SessionWalk, keys: SessionKeys | None) -> int:
    sid = walk.session_id
    seq = rec.get("seq")
    entry = rec.get("entry")
    if walk.saw_head:
        raise _fail(IntegrityReason.CHAIN_MISMATCH, "entry after the signed head", sid, seq)
    if not isinstance(seq, int) or seq != walk.seq + 1:
        raise _fail(
            IntegrityReason.CHAIN_MISMATCH, f"expected seq {walk.seq + 1}, found {seq}", sid, seq
        )
    if not isinstance(entry, dict):
        raise _fail(IntegrityReason.RECORD_HASH_MISMATCH, "entry is not an object", sid, seq)
    if entry.get("previous_hash") != walk.head:
        raise _fail(
            IntegrityReason.CHAIN_MISMATCH,
            f"previous_hash {entry.get('previous_hash')} does not link to {walk.head}",
            sid,
            seq,
        )
    content = entry_content(entry)
    if content.get("session_id", sid) != sid:
        raise _fail(IntegrityReason.CHAIN_MISMATCH, "entry belongs to another session", sid, seq)
    try:
        recomputed = compute_entry_hash(content, walk.head)
    except (WardenError, ValueError) as exc:
        raise _fail(
            IntegrityReason.RECORD_HASH_MISMATCH, f"unhashable entry: {exc}", sid, seq
        ) from exc
    if recomputed != entry.get("entry_hash"):
        raise _fail(
            IntegrityReason.RECORD_HASH_MISMATCH,
            f"entry_hash {entry.get('entry_hash')} ≠ recomputed {recomputed}",
            sid,
            seq,
        )
    checked = 0
    response = rec.get("response")
    if response is not None:
        try:
            inner, signing_input = _response_signing_input(response)
        except (ValueError, AttributeError) as exc:
            raise _fail(IntegrityReason.SIGNATURE_INVALID, str(exc), sid, seq) from exc
        if inner.get("chain_hash") != recomputed:
            raise _fail(
                IntegrityReason.CHAIN_MISMATCH,
                "the response did not publish this entry's hash",
                sid,
                seq,
            )
        if inner.get("request_id") not in (None, content.get("step_id")):
            raise _fail(IntegrityReason.CHAIN_MISMATCH, "response answers another step", sid, seq)
        checked = int(_check_signature(keys, sid, inner, signing_input, seq))
    elif str(content.get("step_type", "")).startswith(("steps/", "protocols/", "agbom/")):
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID, "wire step without its signed response", sid, seq
        )
    walk.seq = seq
    walk.head = recomputed
    return checked


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL export (blank lines skipped).

    A line that is not a JSON object raises :class:`IntegrityError`
    (``record_hash_mismatch``) naming the line number.
    """
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise IntegrityError(
                    f"{path}:{lineno}: not JSON ({exc})",
                    reason=IntegrityReason.RECORD_HASH_MISMATCH,
                ) from exc
            if not isinstance(rec, dict):
                raise IntegrityError(
                    f"{path}:{lineno}: not a JSON object",
                    reason=IntegrityReason.RECORD_HASH_MISMATCH,
                )
            yield rec
