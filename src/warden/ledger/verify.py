"""Offline verification of exported audit chains (ACS spec §8.2, §8.6, §10).

Importable without the server or the store: it takes JSONL records (see
:mod:`warden.ledger.records`) and, optionally, the IKM to check HMAC
signatures. It walks every session in order and raises
:class:`~warden.errors.IntegrityError` at the first broken record, naming the
session, the sequence number and the reason:

1. ``chain_mismatch``        seq gap/duplicate, wrong ``previous_hash`` link,
                             response ``chain_hash`` or signed head ≠ recomputed head,
                             an entry after the session's ``steps/sessionEnd``, a head
                             that calls an ended session open, records of no session
2. ``record_hash_mismatch``  recomputed ``entry_hash`` ≠ stored one; a stored
                             ``request`` whose SHA-256 ≠ the entry's ``request_hash``;
                             a line or stored row that is not strict JSON
3. ``signature_invalid``     a response, head or session signature does not verify,
                             or (with a key) a session record is unsigned

It never mutates the records it reads. A session's end is part of the chain: the
Guardian refuses every step after ``steps/sessionEnd`` without writing an entry,
so an entry after it means the closed flag was reset behind its back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden.crypto import asymmetric
from warden.crypto.canonical import canonical_bytes, parse_strict_json
from warden.crypto.hmac_keys import (
    AGENT_KEY_SCHEME,
    HMAC_ALGORITHM,
    SessionKeys,
    derive_agent_ikm,
    derive_session_key,
    hmac_verify,
)
from warden.errors import ConfigError, IntegrityError, IntegrityReason, ParseError, WardenError
from warden.ledger.chain import compute_entry_hash, entry_content
from warden.ledger.records import (
    MANIFEST_KEY_INFO,
    head_signing_input,
    manifest_signing_input,
    session_signing_input,
)

_SIGNED_RESULT_KEYS = ("result", "error")
SESSION_END = "steps/sessionEnd"


@dataclass
class VerifyReport:
    """Summary of a clean verification.

    ``signatures_checked`` counts response, head and manifest signatures;
    ``session_signatures_checked`` the session records' own signatures.
    """

    sessions: int = 0
    entries: int = 0
    signatures_checked: int = 0
    session_signatures_checked: int = 0
    heads: dict[str, str] = field(default_factory=dict)


@dataclass
class _SessionWalk:
    session_id: str
    seq: int = -1
    head: str | None = None
    saw_head: bool = False
    ended_at: int | None = None  # seq of the steps/sessionEnd entry
    #: The keys of the session's wire responses: the master IKM's, or, for a session
    #: opened with a registered agent's key (issue 15), that key's derived IKM's.
    response_keys: SessionKeys | None = None
    #: An ACS-Crypto session (issue 21): its responses are signed with Warden's
    #: asymmetric key, checked with ``public_keys`` (kid → public key); HMAC is a failure.
    crypto: bool = False
    public_keys: Mapping[str, Any] | None = None


def _fail(reason: IntegrityReason, msg: str, session_id: str, seq: int | None) -> IntegrityError:
    where = f"session {session_id}" + (f" entry seq {seq}" if seq is not None else "")
    return IntegrityError(f"{where}: {msg}", reason=reason, session_id=session_id, seq=seq)


def _check_signature(
    keys: SessionKeys | None,
    session_id: str,
    signed_obj: dict[str, Any],
    envelope_for_input: dict[str, Any],
    seq: int | None,
    what: str = "",
) -> bool:
    """Check ``signed_obj["signature"]`` over ``envelope_for_input``; ``what`` names the
    record in the message ("head " → "head signature does not verify")."""
    if keys is None:
        return False
    sig = signed_obj.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("value"), str):
        raise _fail(IntegrityReason.SIGNATURE_INVALID, f"{what}signature missing", session_id, seq)
    try:
        message = canonical_bytes(envelope_for_input)
    except WardenError as exc:
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID,
            f"{what}cannot canonicalize: {exc}",
            session_id,
            seq,
        ) from exc
    if not hmac_verify(keys.key_for(session_id), message, sig["value"]):
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID, f"{what}signature does not verify", session_id, seq
        )
    return True


def _check_response(
    walk: _SessionWalk, inner: dict[str, Any], envelope_for_input: dict[str, Any], seq: int
) -> bool:
    """A response's signature: HMAC under the session's response keys (with the IKM), or
    an asymmetric one (ACS-Crypto) under the trusted public key its ``key_id`` names
    (with ``public_keys``). An ACS-Crypto session's response signed with HMAC fails."""
    sid = walk.session_id
    sig = inner.get("signature")
    algorithm = sig.get("algorithm") if isinstance(sig, dict) else None
    if walk.crypto and algorithm == HMAC_ALGORITHM:
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID,
            "an ACS-Crypto session's response is signed with HMAC",
            sid,
            seq,
        )
    if not isinstance(sig, dict) or algorithm == HMAC_ALGORITHM:
        return _check_signature(walk.response_keys, sid, inner, envelope_for_input, seq)
    if walk.public_keys is None:
        return False
    key = walk.public_keys.get(str(sig.get("key_id")))
    if key is None:
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID,
            f"response signed by key {str(sig.get('key_id'))!r:.40}, which is not among the "
            "trusted public keys",
            sid,
            seq,
        )
    raw = asymmetric.decode_b64(sig.get("value"))
    try:
        message = canonical_bytes(envelope_for_input)
    except WardenError as exc:
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID, f"cannot canonicalize: {exc}", sid, seq
        ) from exc
    if raw is None or not asymmetric.verify(str(algorithm), key, message, raw):
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID, f"{algorithm} signature does not verify", sid, seq
        )
    return True


def _walk(
    rec: dict[str, Any],
    keys: SessionKeys | None,
    ikm: bytes | None,
    public_keys: Mapping[str, Any] | None,
) -> _SessionWalk:
    negotiated = rec.get("negotiated")
    crypto = isinstance(negotiated, dict) and isinstance(negotiated.get("crypto"), dict)
    return _SessionWalk(
        str(rec.get("session_id", "")),
        response_keys=_response_keys(rec, keys, ikm),
        crypto=crypto,
        public_keys=public_keys,
    )


def _response_keys(
    rec: dict[str, Any], keys: SessionKeys | None, ikm: bytes | None
) -> SessionKeys | None:
    """The keys that signed the responses of the session ``rec`` describes. The session
    record (signed under the master IKM) names the scheme in ``negotiated.identity``; a
    session without it (opened before issue 15, or with the shared IKM) used the master's."""
    negotiated = rec.get("negotiated")
    identity = negotiated.get("identity") if isinstance(negotiated, dict) else None
    if (
        ikm is None
        or not isinstance(identity, dict)
        or identity.get("scheme") != AGENT_KEY_SCHEME
        or not isinstance(rec.get("key_id"), str)
    ):
        return keys
    return SessionKeys(derive_agent_ikm(ikm, rec["key_id"]))


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
    public_keys: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """Verify exported records; return a summary or raise :class:`IntegrityError`.

    ``ikm`` enables HMAC checks of every response, signed head and session
    record; without it only hashes and links are checked (``signatures_checked``
    stays 0).
    ``public_keys`` (kid → public key, e.g. Warden's published JWKS) enables the checks
    of ACS-Crypto responses, signed with Warden's ML-DSA-65 key (issue 21), with or
    without the IKM.
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
            walks[sid] = _walk(rec, keys, ikm, public_keys)
            report.sessions += 1
            report.session_signatures_checked += _check_signature(
                keys, sid, rec, session_signing_input(rec), None, "session record "
            )
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
            _check_closed(rec, walk)
            report.signatures_checked += _check_signature(
                keys, sid, rec, head_signing_input(rec), None, "head "
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


def _check_closed(head: dict[str, Any], walk: _SessionWalk) -> None:
    """A head's ``closed`` flag (absent in older exports) must agree with the chain."""
    if "closed" not in head:
        return
    closed = head["closed"]
    if not isinstance(closed, bool):
        raise _fail(
            IntegrityReason.CHAIN_MISMATCH,
            "the head's closed flag is not a boolean",
            walk.session_id,
            None,
        )
    if walk.ended_at is not None and not closed:
        raise _fail(
            IntegrityReason.CHAIN_MISMATCH,
            f"the head says the session is open, but it ended ({SESSION_END} at seq "
            f"{walk.ended_at})",
            walk.session_id,
            None,
        )


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
    if walk.ended_at is not None:
        raise _fail(
            IntegrityReason.CHAIN_MISMATCH,
            f"entry after the session ended ({SESSION_END} at seq {walk.ended_at})",
            sid,
            seq,
        )
    if "request" in rec:
        _check_request(rec["request"], content, sid, seq)
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
        checked = int(_check_response(walk, inner, signing_input, seq))
    elif str(content.get("step_type", "")).startswith(("steps/", "protocols/", "agbom/")):
        raise _fail(
            IntegrityReason.SIGNATURE_INVALID, "wire step without its signed response", sid, seq
        )
    walk.seq = seq
    walk.head = recomputed
    if content.get("step_type") == SESSION_END:
        walk.ended_at = seq
    return checked


def _check_request(request: Any, content: dict[str, Any], sid: str, seq: int) -> None:
    """The stored request must be exactly what the entry's ``request_hash`` covers."""
    try:
        digest = hashlib.sha256(request.encode("utf-8")).hexdigest()
    except (AttributeError, UnicodeEncodeError) as exc:
        raise _fail(
            IntegrityReason.RECORD_HASH_MISMATCH, "the stored request is not text", sid, seq
        ) from exc
    if digest != content.get("request_hash"):
        raise _fail(
            IntegrityReason.RECORD_HASH_MISMATCH,
            f"the stored request hashes to {digest}, not the entry's request_hash "
            f"{content.get('request_hash')}",
            sid,
            seq,
        )


_PARSE_FAILURES = {"invalid_json": "not JSON", "invalid_utf8": "not UTF-8"}


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL export (blank lines skipped).

    Each line is parsed strictly (:func:`~warden.crypto.canonical.parse_strict_json`):
    a line that is not UTF-8 JSON, repeats a key or is not an object raises
    :class:`IntegrityError` (``record_hash_mismatch``) naming the line number. A
    file that cannot be read raises :class:`ConfigError`.
    """
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with fh:
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except OSError as exc:
                raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
            if not line:
                return
            lineno += 1
            if not line.strip():
                continue
            try:
                rec = parse_strict_json(line)
            except ParseError as exc:
                raise IntegrityError(
                    f"{path}:{lineno}: {_PARSE_FAILURES.get(exc.reason, 'not strict JSON')} "
                    f"({exc.message})",
                    reason=IntegrityReason.RECORD_HASH_MISMATCH,
                ) from exc
            if not isinstance(rec, dict):
                raise IntegrityError(
                    f"{path}:{lineno}: not a JSON object",
                    reason=IntegrityReason.RECORD_HASH_MISMATCH,
                )
            yield rec


@dataclass(frozen=True)
class LinkReport:
    """What :func:`verify_link` checked of one stored entry, all clean.

    ``signatures_checked`` counts the session record's, the entry's response and (when the
    entry is the head) the signed head's signatures (0 without the IKM);
    ``previous_seq`` is the predecessor's seq (None for the first entry);
    ``successor_links`` is True when the next entry's ``previous_hash`` is this entry's
    hash, None when there is no next entry; ``is_head`` is True when the session's signed
    head names this entry.
    """

    signatures_checked: int
    previous_seq: int | None
    successor_links: bool | None
    is_head: bool


def verify_link(
    session: dict[str, Any],
    previous: dict[str, Any] | None,
    record: dict[str, Any],
    *,
    following: dict[str, Any] | None = None,
    head: dict[str, Any] | None = None,
    ikm: bytes | None = None,
    public_keys: Mapping[str, Any] | None = None,
) -> LinkReport:
    """Verify one entry's place in its chain (ACS §8.2) without walking the session.

    Takes export-shaped records (:mod:`warden.ledger.records`): the ``session`` record,
    the entry ``previous`` to this one (None for seq 0), the entry ``record`` itself,
    optionally the ``following`` entry and the session's ``head`` record. Checks, as
    :func:`verify_records` does for each entry of a walk: the predecessor's own hash
    over its content and link, this entry's ``previous_hash`` link to it, this entry's
    recomputed hash, its stored ``request`` against ``request_hash``, and (with ``ikm``)
    the session record's and the response's HMAC signatures; then that ``following``
    links back to this entry and, when ``head`` names this entry's seq, that the head's
    ``chain_hash`` is this entry's hash and its signature verifies.

    Raises :class:`~warden.errors.IntegrityError` (``chain_mismatch``,
    ``record_hash_mismatch`` or ``signature_invalid``) at the first failure. What lies
    before the predecessor is not checked: ``warden verify`` walks whole chains.
    """
    keys = SessionKeys(ikm) if ikm is not None else None
    sid = str(session.get("session_id", ""))
    seq = record.get("seq")
    if record.get("session_id") != sid or (
        previous is not None and previous.get("session_id") != sid
    ):
        raise _fail(IntegrityReason.CHAIN_MISMATCH, "records of another session", sid, None)
    checked = int(
        _check_signature(
            keys, sid, session, session_signing_input(session), None, "session record "
        )
    )
    walk = _walk(session, keys, ikm, public_keys)
    if previous is not None:
        prev_entry = previous.get("entry")
        prev_seq = previous.get("seq")
        if not isinstance(prev_entry, dict) or not isinstance(prev_seq, int):
            raise _fail(IntegrityReason.RECORD_HASH_MISMATCH, "damaged predecessor", sid, prev_seq)
        try:
            prev_hash = compute_entry_hash(
                entry_content(prev_entry), prev_entry.get("previous_hash")
            )
        except (WardenError, ValueError) as exc:
            raise _fail(
                IntegrityReason.RECORD_HASH_MISMATCH, f"unhashable entry: {exc}", sid, prev_seq
            ) from exc
        if prev_hash != prev_entry.get("entry_hash"):
            raise _fail(
                IntegrityReason.RECORD_HASH_MISMATCH,
                f"entry_hash {prev_entry.get('entry_hash')} ≠ recomputed {prev_hash}",
                sid,
                prev_seq,
            )
        walk.seq, walk.head = prev_seq, prev_hash
    checked += _verify_entry(record, walk, keys)
    successor: bool | None = None
    if following is not None:
        nxt = following.get("entry")
        successor = isinstance(nxt, dict) and nxt.get("previous_hash") == walk.head
        if not successor:
            raise _fail(
                IntegrityReason.CHAIN_MISMATCH,
                f"the next entry does not link to this one ({walk.head})",
                sid,
                following.get("seq"),
            )
    is_head = head is not None and head.get("seq") == seq
    if head is not None and is_head:
        if head.get("chain_hash") != walk.head:
            raise _fail(
                IntegrityReason.CHAIN_MISMATCH,
                f"signed head {head.get('chain_hash')} is not this entry's hash {walk.head}",
                sid,
                None,
            )
        checked += int(_check_signature(keys, sid, head, head_signing_input(head), None, "head "))
    return LinkReport(
        signatures_checked=checked,
        previous_seq=previous.get("seq") if previous is not None else None,
        successor_links=successor,
        is_head=is_head,
    )
