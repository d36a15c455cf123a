"""Offline verification of KLA records and evidence bundles (seed 004 §05).

Importable without the server or the store, and it never signs. For one record
(:func:`verify_record`) the steps are, in order:

1. parse the bytes as strict JSON (duplicate keys, NaN and invalid UTF-8 are
   refused: :class:`~warden.errors.ParseError`, bad input, not an outcome);
2. read ``schema_version``: a version this verifier does not support gives
   ``unsupported_schema_version`` and stops; the record is reported (with its
   digest, for review), not processed;
3. validate the shape against the kind's JSON Schema with date-time format
   checking (``schema_invalid``, with the JSON pointer and the message);
4. recompute the digest (:func:`warden.kla.digest.record_digest`) and compare
   it with the digest the caller kept (``record_hash_mismatch``);
5. when a detached signature is supplied, resolve the public key from the
   caller's key (or key registry and kid), never from the record, and verify
   Ed25519 over the 32 digest bytes (``signature_invalid``; an unknown kid and
   a malformed signature are ``signature_invalid`` too).

The input is never modified. An evidence bundle (:func:`verify_bundle`) is
checked line by line the same way, then its manifest (digest list, optional
signature) and the references between records (``reference_mismatch``).
"""

from __future__ import annotations

import binascii
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA65PublicKey

from warden.crypto import asymmetric
from warden.crypto.asymmetric import unb64url
from warden.crypto.canonical import parse_strict_json
from warden.errors import InvalidRequest, WardenError
from warden.kla.digest import (
    decode_signature,
    digest_bytes,
    is_digest,
    manifest_digest,
    record_digest,
)
from warden.kla.keys import KeyRegistry, TrustedKey, UnknownKeyId
from warden.kla.records import (
    AGREEMENTS,
    BUNDLE_LINE_SCHEMA,
    BUNDLE_MANIFEST_SCHEMA,
    BUNDLE_VERSION,
    KEYS_DIR,
    MANIFEST_FILE,
    RECORDS_FILE,
    REFERENCES,
    SUPPORTED_SCHEMA_VERSIONS,
    RecordKind,
    detect_kind,
    kla_schemas,
    shape_error,
)


class VerifyStatus(StrEnum):
    """The result of a verification; each failure has its own CLI exit code."""

    OK = "ok"
    SCHEMA_INVALID = "schema_invalid"
    RECORD_HASH_MISMATCH = "record_hash_mismatch"
    SIGNATURE_INVALID = "signature_invalid"
    UNSUPPORTED_SCHEMA_VERSION = "unsupported_schema_version"
    REFERENCE_MISMATCH = "reference_mismatch"


@dataclass(frozen=True)
class VerifyOutcome:
    """What :func:`verify_record` found for one record.

    ``digest`` is the recomputed digest whenever the record could be
    canonicalized (also on failure, for the investigation); ``pointer`` is the
    RFC 6901 JSON pointer of a ``schema_invalid`` failure; ``kid`` names the key
    a checked signature was verified with.
    """

    status: VerifyStatus
    message: str
    kind: RecordKind | None = None
    schema_version: str | None = None
    record_id: str | None = None
    digest: str | None = None
    pointer: str | None = None
    signature_checked: bool = False
    kid: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is VerifyStatus.OK


def verify_ed25519(public_key: Ed25519PublicKey, message: bytes, signature: bytes) -> bool:
    """Raw Ed25519 verification (RFC 8032): True iff ``signature`` is valid for ``message``."""
    try:
        public_key.verify(signature, message)
    except InvalidSignature:
        return False
    return True


def verify_signature(public_key: TrustedKey, digest: str, signature: str) -> bool:
    """Verify a detached signature (unpadded base64url) over the 32 bytes of ``digest``:
    Ed25519, or ML-DSA-65 for an ML-DSA-65 key (issue 21; FIPS 204, empty context).

    False for a wrong or malformed signature. Raises
    :class:`~warden.errors.InvalidRequest` (``bad_digest``) when ``digest`` is not
    ``sha256:`` + 64 lowercase hex.
    """
    message = digest_bytes(digest)
    if isinstance(public_key, MLDSA65PublicKey):
        try:
            raw_pq = unb64url(signature)
        except (ValueError, binascii.Error):
            return False
        return asymmetric.verify(asymmetric.ML_DSA_65, public_key, message, raw_pq)
    try:
        raw = decode_signature(signature)
    except InvalidRequest:
        return False
    return verify_ed25519(public_key, message, raw)


def _safe_digest(record: Any) -> str | None:
    try:
        return record_digest(record)
    except WardenError:
        return None


def _resolve_key(
    public_key: TrustedKey | None, registry: KeyRegistry | None, kid: str | None
) -> tuple[TrustedKey, str | None]:
    """The key a signature is checked with; UnknownKeyId for a kid the registry lacks."""
    if public_key is not None:
        return public_key, kid
    assert registry is not None
    if kid is None:
        only = list(registry)
        if len(only) != 1:
            raise InvalidRequest(
                f"the key registry holds {len(only)} keys; name the signing key's kid",
                reason="kid_required",
            )
        kid = only[0]
    return registry.get_key(kid), kid


def _check_arguments(
    expected_digest: str | None,
    signature: str | None,
    public_key: TrustedKey | None,
    registry: KeyRegistry | None,
) -> None:
    if expected_digest is not None and not is_digest(expected_digest):
        raise InvalidRequest(
            f"expected digest {expected_digest!r:.80} is not sha256: + 64 lowercase hex",
            reason="bad_digest",
        )
    if public_key is not None and registry is not None:
        raise InvalidRequest("give a public key or a key registry, not both", reason="bad_key")
    has_key = public_key is not None or registry is not None
    if signature is not None and not has_key:
        raise InvalidRequest("a signature needs a public key to verify it", reason="key_required")
    if signature is None and has_key:
        raise InvalidRequest("a public key was given without a signature", reason="bad_key")


def verify_record_value(
    record: Any,
    *,
    expected_digest: str | None = None,
    signature: str | None = None,
    public_key: TrustedKey | None = None,
    registry: KeyRegistry | None = None,
    kid: str | None = None,
    kind: RecordKind | None = None,
) -> VerifyOutcome:
    """Steps 2–5 of :func:`verify_record` on an already strictly parsed record."""
    _check_arguments(expected_digest, signature, public_key, registry)
    if not isinstance(record, dict):
        return VerifyOutcome(VerifyStatus.SCHEMA_INVALID, "a record is a JSON object", pointer="")
    kind = kind or detect_kind(record)
    rid = record.get(kind.id_field)
    base: dict[str, Any] = {"kind": kind, "record_id": rid if isinstance(rid, str) else None}
    version = record.get("schema_version")
    if not isinstance(version, str):
        return VerifyOutcome(
            VerifyStatus.SCHEMA_INVALID,
            "schema_version is required and must be a string",
            pointer="/schema_version",
            digest=_safe_digest(record),
            **base,
        )
    base["schema_version"] = version
    if version not in SUPPORTED_SCHEMA_VERSIONS[kind]:
        supported = ", ".join(sorted(SUPPORTED_SCHEMA_VERSIONS[kind]))
        return VerifyOutcome(
            VerifyStatus.UNSUPPORTED_SCHEMA_VERSION,
            f"{kind.value} schema_version {version!r:.40} is not supported (supported: "
            f"{supported}); the record is kept for review and not processed",
            digest=_safe_digest(record),
            **base,
        )
    err = shape_error(record, kind)
    if err is not None:
        return VerifyOutcome(
            VerifyStatus.SCHEMA_INVALID,
            err[1],
            pointer=err[0],
            digest=_safe_digest(record),
            **base,
        )
    digest = record_digest(record)  # a valid record holds strings only: always canonicalizable
    base["digest"] = digest
    if expected_digest is not None and expected_digest != digest:
        return VerifyOutcome(
            VerifyStatus.RECORD_HASH_MISMATCH,
            f"record digest {digest} differs from the expected {expected_digest}",
            **base,
        )
    if signature is None:
        return VerifyOutcome(VerifyStatus.OK, "record verified", **base)
    try:
        key, used_kid = _resolve_key(public_key, registry, kid)
    except UnknownKeyId as exc:
        return VerifyOutcome(VerifyStatus.SIGNATURE_INVALID, exc.message, kid=kid, **base)
    base["kid"] = used_kid
    if isinstance(key, MLDSA65PublicKey):
        if not verify_signature(key, digest, signature):
            who = f" (kid {used_kid})" if used_kid else ""
            return VerifyOutcome(
                VerifyStatus.SIGNATURE_INVALID,
                f"the ML-DSA-65 signature does not verify over {digest} with the given key{who}",
                **base,
            )
        return VerifyOutcome(
            VerifyStatus.OK, "record and signature verified", signature_checked=True, **base
        )
    try:
        raw = decode_signature(signature)
    except InvalidRequest as exc:
        return VerifyOutcome(VerifyStatus.SIGNATURE_INVALID, exc.message, **base)
    if not verify_ed25519(key, digest_bytes(digest), raw):
        who = f" (kid {used_kid})" if used_kid else ""
        return VerifyOutcome(
            VerifyStatus.SIGNATURE_INVALID,
            f"the Ed25519 signature does not verify over {digest} with the given key{who}",
            **base,
        )
    return VerifyOutcome(
        VerifyStatus.OK, "record and signature verified", signature_checked=True, **base
    )


def verify_record(
    raw: bytes | str,
    *,
    expected_digest: str | None = None,
    signature: str | None = None,
    public_key: TrustedKey | None = None,
    registry: KeyRegistry | None = None,
    kid: str | None = None,
    kind: RecordKind | None = None,
) -> VerifyOutcome:
    """Verify one KLA record from its bytes (the steps in the module docstring).

    ``kind`` defaults to the kind the record names by its id field
    (:func:`~warden.kla.records.detect_kind`). The signature key is either
    ``public_key`` or looked up in ``registry`` by ``kid`` (``kid`` may be
    omitted when the registry holds one key).

    Raises :class:`~warden.errors.ParseError` when ``raw`` is not strict JSON
    and :class:`~warden.errors.InvalidRequest` for inconsistent arguments (a
    malformed expected digest, a signature without a key or a key without a
    signature, a registry of several keys without a kid). Every verification
    failure is a :class:`VerifyOutcome`, not an exception.
    """
    _check_arguments(expected_digest, signature, public_key, registry)
    record = parse_strict_json(raw)
    return verify_record_value(
        record,
        expected_digest=expected_digest,
        signature=signature,
        public_key=public_key,
        registry=registry,
        kid=kid,
        kind=kind,
    )


# --- evidence bundles -----------------------------------------------------------------


@dataclass(frozen=True)
class BundleProblem:
    """One failure in a bundle: where (``records.jsonl:<line>`` or ``manifest.json``) and why."""

    status: VerifyStatus
    where: str
    message: str
    pointer: str | None = None


@dataclass
class BundleOutcome:
    """What :func:`verify_bundle` found: every problem, in the order checked.

    ``status`` is the first problem's (``ok`` when there is none).
    ``keys_trusted`` is False when signatures were checked against the
    bundle's own ``keys/`` rather than a registry the caller holds: that proves
    the bundle is consistent, not who produced it.
    """

    problems: list[BundleProblem] = field(default_factory=list)
    records: list[VerifyOutcome] = field(default_factory=list)
    signatures_checked: int = 0
    manifest_signed: bool = False
    keys_trusted: bool = False
    execution_id: str | None = None
    chain_head: str | None = None

    @property
    def status(self) -> VerifyStatus:
        return self.problems[0].status if self.problems else VerifyStatus.OK

    @property
    def ok(self) -> bool:
        return not self.problems


def _read_bundle_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise InvalidRequest(
            f"{path.parent} is not an evidence bundle: {path.name} is missing",
            reason="not_a_bundle",
        ) from exc
    except OSError as exc:
        raise InvalidRequest(f"{path} cannot be read: {exc.strerror or exc}") from exc


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, 1):
        yield number, line.rstrip(b"\r")


def _get(record: Any, pointer: str) -> Any:
    """The value at a simple JSON pointer (``/a/b``), None when absent."""
    for part in pointer.strip("/").split("/"):
        record = record.get(part) if isinstance(record, dict) else None
    return record


def _joined(record: dict[str, Any]) -> tuple[str, str]:
    """What links records of one execution: correlation_id and execution_id (not the span)."""
    return record["correlation"]["correlation_id"], record["correlation"]["execution_id"]


@dataclass
class _Line:
    where: str
    kind: RecordKind
    record: dict[str, Any]
    digest: str


class _BundleCheck:
    """One run of :func:`verify_bundle`; collects problems into ``out``."""

    def __init__(self, registry: KeyRegistry | None, require_signatures: bool) -> None:
        self.registry = registry
        self.require_signatures = require_signatures
        self.out = BundleOutcome()
        self.digests: list[str] = []
        self.verified: list[_Line] = []

    def problem(
        self, status: VerifyStatus, where: str, message: str, pointer: str | None = None
    ) -> None:
        self.out.problems.append(BundleProblem(status, where, message, pointer))

    def signature(
        self,
        where: str,
        digest: str,
        signature: Any,
        kid: Any,
        *,
        warden_signed: bool = True,
        more: list[dict[str, Any]] | None = None,
    ) -> None:
        """Check a record's signatures: ``signature``/``kid`` (Ed25519) and ``more`` (the
        line's ``signatures``, ML-DSA-65; issue 21). Every signature whose kid the
        registry holds must verify, and at least one must be checkable: a verifier that
        knows either key accepts. Warden signs every record it writes and the manifest,
        so those are refused unsigned (else stripping signatures would make an edited
        bundle pass); an agent's action request may be unsigned unless signatures are
        required."""
        bad = VerifyStatus.SIGNATURE_INVALID
        pairs = [(signature, kid)] if signature is not None else []
        pairs += [(m.get("signature"), m.get("kid")) for m in more or ()]
        if not pairs:
            if self.require_signatures or warden_signed:
                self.problem(bad, where, "unsigned (Warden signs this record)")
            return
        known = [(sig, k) for sig, k in pairs if self.registry is not None and k in self.registry]
        if not known:
            source = self.registry.source if self.registry else "(the bundle has no keys/)"
            kids = ", ".join(repr(k) for _, k in pairs)
            self.problem(bad, where, f"kid {kids} is not in the key registry {source}")
            return
        assert self.registry is not None
        for sig, k in known:
            key = self.registry.get_key(k)
            if not verify_signature(key, digest, sig):
                alg = "ML-DSA-65" if isinstance(key, MLDSA65PublicKey) else "Ed25519"
                self.problem(bad, where, f"the {alg} signature does not verify over {digest}")
                return
        self.out.signatures_checked += len(known)

    def line(self, number: int, text: bytes) -> None:
        where = f"{RECORDS_FILE}:{number}"
        try:
            line = parse_strict_json(text)
        except WardenError as exc:
            self.problem(
                VerifyStatus.RECORD_HASH_MISMATCH, where, f"not strict JSON: {exc.message}"
            )
            return
        err = kla_schemas().first_error(BUNDLE_LINE_SCHEMA, line)
        if err is not None:
            self.problem(VerifyStatus.SCHEMA_INVALID, where, f"bundle line: {err[1]}", err[0])
            return
        kind = RecordKind(line["kind"])
        self.digests.append(line["digest"])
        outcome = verify_record_value(line["record"], expected_digest=line["digest"], kind=kind)
        self.out.records.append(outcome)
        if not outcome.ok:
            pointer = None if outcome.pointer is None else "/record" + outcome.pointer
            self.problem(outcome.status, where, outcome.message, pointer)
            return
        self.signature(
            where,
            line["digest"],
            line.get("signature"),
            line.get("kid"),
            warden_signed=kind is not RecordKind.ACTION_REQUEST,
            more=line.get("signatures"),
        )
        self.verified.append(_Line(where, kind, line["record"], line["digest"]))

    def manifest(self, manifest: Any) -> None:
        version = manifest.get("bundle_version") if isinstance(manifest, dict) else None
        if isinstance(version, str) and version != BUNDLE_VERSION:
            self.problem(
                VerifyStatus.UNSUPPORTED_SCHEMA_VERSION,
                MANIFEST_FILE,
                f"bundle_version {version!r:.40} is not supported (supported: {BUNDLE_VERSION})",
            )
            return
        err = kla_schemas().first_error(BUNDLE_MANIFEST_SCHEMA, manifest)
        if err is not None:
            self.problem(VerifyStatus.SCHEMA_INVALID, MANIFEST_FILE, err[1], err[0])
            return
        self.out.execution_id = manifest.get("execution_id")
        self.out.chain_head = manifest.get("chain_head")
        listed: list[str] = manifest["records"]
        if listed != self.digests:
            pairs = zip(listed, self.digests, strict=False)
            index = next(
                (i for i, (a, b) in enumerate(pairs) if a != b),
                min(len(listed), len(self.digests)),
            )
            self.problem(
                VerifyStatus.RECORD_HASH_MISMATCH,
                MANIFEST_FILE,
                f"the manifest lists {len(listed)} record digests, {RECORDS_FILE} holds "
                f"{len(self.digests)}; they first differ at record {index + 1}",
                f"/records/{index}",
            )
        self.out.manifest_signed = "signature" in manifest
        digest = manifest_digest(manifest)
        self.signature(MANIFEST_FILE, digest, manifest.get("signature"), manifest.get("kid"))

    def references(self) -> None:
        """Every reference resolves to a verified record, by id and digest, in one correlation."""
        by_id: dict[tuple[RecordKind, str], _Line] = {}
        for line in self.verified:
            key = (line.kind, line.record[line.kind.id_field])
            if key in by_id:
                self.mismatch(line, f"{key[1]!r} also appears at {by_id[key].where}", "")
            else:
                by_id[key] = line
        execution_id = self.out.execution_id
        for line in self.verified:
            correlation = line.record["correlation"]
            if execution_id is not None and correlation["execution_id"] != execution_id:
                self.mismatch(
                    line,
                    f"execution_id differs from the manifest's {execution_id!r}",
                    "/correlation/execution_id",
                )
            targets: dict[RecordKind, _Line] = {}
            for kind, id_at, digest_at in REFERENCES.get(line.kind, ()):
                rid = _get(line.record, id_at)
                if rid is None:
                    continue  # an optional reference (the schema requires the others)
                target = by_id.get((kind, rid))
                digest = _get(line.record, digest_at) if digest_at else None
                if target is None:
                    self.mismatch(line, f"{kind.value} {rid!r} is not in the bundle", id_at)
                elif digest_at is not None and digest != target.digest:
                    self.mismatch(
                        line,
                        f"names {kind.value} {rid!r} by digest {digest}; that record "
                        f"({target.where}) has digest {target.digest}",
                        digest_at,
                    )
                else:
                    targets[kind] = target
                    if _joined(target.record) != _joined(line.record):
                        self.mismatch(
                            line, f"correlation differs from {target.where}", "/correlation"
                        )
            for kind, own_at, their_at in AGREEMENTS.get(line.kind, ()):
                target = targets.get(kind)
                if target is not None and _get(line.record, own_at) != _get(
                    target.record, their_at
                ):
                    self.mismatch(
                        line, f"{own_at} differs from {their_at} at {target.where}", own_at
                    )
            decision = targets.get(RecordKind.POLICY_DECISION)
            if (
                line.kind is RecordKind.APPROVAL_EVENT
                and decision is not None
                and decision.record["decision"] != "require_approval"
            ):
                self.mismatch(
                    line,
                    f"resolves a {decision.record['decision']} decision, not require_approval",
                    "/policy_decision_id",
                )

    def mismatch(self, line: _Line, message: str, pointer: str) -> None:
        self.problem(VerifyStatus.REFERENCE_MISMATCH, line.where, message, "/record" + pointer)


def verify_bundle(
    directory: Path,
    *,
    trusted_keys: KeyRegistry | None = None,
    require_signatures: bool = False,
) -> BundleOutcome:
    """Verify an evidence bundle directory offline (layout: README.md of ``schemas/kla``).

    Each ``records.jsonl`` line is checked like :func:`verify_record` against
    its own ``digest`` (a line that is not strict JSON is
    ``record_hash_mismatch``) and its signature, if any; then the manifest's
    digest list against the lines, in order, and the manifest signature, if
    any; then the references between the records that verified
    (``reference_mismatch``): a decision's request is in the bundle with the
    digest the decision names; an approval's request and decision are, and the
    decision was require_approval; an audit event's request, decision and
    approval are, with the digests, decision and outcome it repeats; ids are
    unique per kind; all share the correlation and the manifest's execution_id.

    Signatures are checked with ``trusted_keys`` when given, else with the
    bundle's own ``keys/`` (then ``keys_trusted`` is False). With
    ``require_signatures`` an unsigned line or manifest is ``signature_invalid``.

    Raises :class:`~warden.errors.InvalidRequest` when the directory is not a
    bundle (manifest.json or records.jsonl missing or unreadable),
    :class:`~warden.errors.ParseError` when manifest.json is not strict JSON,
    and :class:`~warden.errors.ConfigError` for an invalid key registry.
    """
    manifest_raw = _read_bundle_file(directory / MANIFEST_FILE)
    records_raw = _read_bundle_file(directory / RECORDS_FILE)
    manifest = parse_strict_json(manifest_raw)
    registry = trusted_keys
    if registry is None and (directory / KEYS_DIR).exists():
        registry = KeyRegistry.load(directory / KEYS_DIR)
    check = _BundleCheck(registry, require_signatures)
    check.out.keys_trusted = trusted_keys is not None
    for number, text in _lines(records_raw):
        check.line(number, text)
    check.manifest(manifest)
    check.references()
    return check.out
