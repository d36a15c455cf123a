"""The four KLA records and how Warden produces them as signed evidence.

Seed 004 (AI agent action request v1) and the records that follow it in its
reference sequence: the **action request** (the authority an agent asks to
use), the **policy decision** (allow / warn / require_approval / block), the
**approval event** (maker-checker) and the **audit event** that ties request,
decision, approval, tool call and outcome together. Their JSON Schemas (draft
2020-12) ship in ``warden/schemas/kla/`` and are loaded through
:class:`warden.schemas.SchemaSet` with date-time format checking.

This module is the producing side: kinds and versions, shape checks, the
mapping from Warden verdicts to KLA decisions (DESIGN.md "The decision
vocabulary"), signing a digest, and writing an evidence bundle. Verification
lives apart in :mod:`warden.kla.verify` and never signs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
)

from warden.core.types import Effect
from warden.crypto.asymmetric import MlDsaSigner, b64url
from warden.errors import ConfigError, InvalidParams
from warden.kla.digest import (
    digest_bytes,
    encode_signature,
    manifest_digest,
    record_digest,
)
from warden.kla.keys import KeyRegistry, TrustedKey
from warden.kla.kinds import RecordKind as RecordKind
from warden.schemas import SchemaSet, schema_set

#: The schema_version of every v1 record Warden writes.
SCHEMA_VERSION = "1.0.0"
#: The evidence-bundle layout version (manifest ``bundle_version``).
BUNDLE_VERSION = "1.0.0"

RECORDS_FILE = "records.jsonl"
MANIFEST_FILE = "manifest.json"
KEYS_DIR = "keys"


#: schema_version values each kind is processed under; anything else is kept for
#: review and not processed (seed 004 §06: consumers declare support first).
SUPPORTED_SCHEMA_VERSIONS: Mapping[RecordKind, frozenset[str]] = {
    kind: frozenset({SCHEMA_VERSION}) for kind in RecordKind
}

#: Evidence-bundle schemas beside the record schemas.
BUNDLE_LINE_SCHEMA = "evidence-bundle-line.json"
BUNDLE_MANIFEST_SCHEMA = "evidence-bundle-manifest.json"


#: What each kind references, for bundle verification: (referenced kind, JSON pointer to its
#: id, JSON pointer to its digest or None). A reference whose id is absent is optional.
REFERENCES: dict[RecordKind, tuple[tuple[RecordKind, str, str | None], ...]] = {
    RecordKind.POLICY_DECISION: (
        (RecordKind.ACTION_REQUEST, "/action_request_id", "/action_request_digest"),
    ),
    RecordKind.APPROVAL_EVENT: (
        (RecordKind.ACTION_REQUEST, "/action_request_id", None),
        (RecordKind.POLICY_DECISION, "/policy_decision_id", None),
    ),
    RecordKind.AUDIT_EVENT: (
        (RecordKind.ACTION_REQUEST, "/action_request/action_request_id", "/action_request/digest"),
        (
            RecordKind.POLICY_DECISION,
            "/policy_decision/policy_decision_id",
            "/policy_decision/digest",
        ),
        (RecordKind.APPROVAL_EVENT, "/approval_event/approval_event_id", "/approval_event/digest"),
    ),
}
#: Values a record repeats from a record it references: (referenced kind, own pointer,
#: pointer in the referenced record); they must be equal.
AGREEMENTS: dict[RecordKind, tuple[tuple[RecordKind, str, str], ...]] = {
    RecordKind.APPROVAL_EVENT: (
        (RecordKind.POLICY_DECISION, "/action_request_id", "/action_request_id"),
    ),
    RecordKind.AUDIT_EVENT: (
        (RecordKind.POLICY_DECISION, "/action_request/action_request_id", "/action_request_id"),
        (RecordKind.POLICY_DECISION, "/policy_decision/decision", "/decision"),
        (RecordKind.APPROVAL_EVENT, "/approval_event/outcome", "/outcome"),
        (RecordKind.APPROVAL_EVENT, "/policy_decision/policy_decision_id", "/policy_decision_id"),
    ),
}


class KlaDecision(StrEnum):
    """The KLA decision vocabulary; strength orders combining (strongest wins)."""

    ALLOW = "allow"
    WARN = "warn"
    REQUIRE_APPROVAL = "require_approval"
    BLOCK = "block"

    @property
    def strength(self) -> int:
        return list(KlaDecision).index(self)


def kla_decision(effect: Effect, *, warn: bool = False) -> KlaDecision:
    """The KLA decision for a Warden verdict (DESIGN.md, decision vocabulary table).

    allow → ``allow`` (``warn`` with the advisory flag); modify → ``warn``;
    ask and defer → ``require_approval``; deny → ``block``.
    """
    if effect is Effect.ALLOW:
        return KlaDecision.WARN if warn else KlaDecision.ALLOW
    if effect is Effect.MODIFY:
        return KlaDecision.WARN
    if effect in (Effect.ASK, Effect.DEFER):
        return KlaDecision.REQUIRE_APPROVAL
    return KlaDecision.BLOCK


def detect_kind(record: Mapping[str, Any]) -> RecordKind:
    """The kind a record claims by its own id field (an action request when none other).

    Checked most specific first: an approval event also names its
    ``policy_decision_id``, and decisions and approvals name the
    ``action_request_id``.
    """
    for kind in (RecordKind.AUDIT_EVENT, RecordKind.APPROVAL_EVENT, RecordKind.POLICY_DECISION):
        if kind.id_field in record:
            return kind
    return RecordKind.ACTION_REQUEST


@cache
def kla_schemas() -> SchemaSet:
    """The compiled KLA schema set (``warden/schemas/kla``), loaded once."""
    return schema_set("kla")


def shape_error(record: Any, kind: RecordKind) -> tuple[str, str] | None:
    """``(json_pointer, message)`` of the first shape error, or None when valid.

    Validates against the kind's schema with format checking (``requested_at``
    and the other times must be RFC 3339 date-times), then the rule a schema
    cannot state: an approval event's checker is not its maker.
    """
    err = kla_schemas().first_error(kind.schema_path, record)
    if err is not None:
        return err
    if (
        kind is RecordKind.APPROVAL_EVENT
        and record["maker"]["principal"] == record["checker"]["principal"]
    ):
        return "/checker/principal", "the checker must be a different principal from the maker"
    return None


def sign_digest(private_key: Ed25519PrivateKey, digest: str) -> str:
    """Detached Ed25519 signature over the 32 raw bytes of ``digest``, unpadded base64url.

    Raises :class:`~warden.errors.InvalidRequest` (reason ``bad_digest``) when
    ``digest`` is not ``sha256:`` + 64 lowercase hex.
    """
    return encode_signature(private_key.sign(digest_bytes(digest)))


@dataclass(frozen=True)
class SealedRecord:
    """A record with its digest and optional detached signature: one bundle line."""

    kind: RecordKind
    record: dict[str, Any]
    digest: str
    signature: str | None = None
    kid: str | None = None
    #: Signatures beside the Ed25519 one (issue 21): ``{alg, kid, signature}`` each, the
    #: signature over the same 32 digest bytes as unpadded base64url (ML-DSA-65: 4412 chars).
    signatures: tuple[dict[str, str], ...] = ()

    def to_line(self) -> dict[str, Any]:
        """The ``records.jsonl`` object: ``{kind, record, digest[, signature, kid]
        [, signatures]}``."""
        line: dict[str, Any] = {
            "kind": self.kind.value,
            "record": self.record,
            "digest": self.digest,
        }
        if self.signature is not None:
            line["signature"] = self.signature
            line["kid"] = self.kid
        if self.signatures:
            line["signatures"] = [dict(s) for s in self.signatures]
        return line

    def signatures_json(self) -> str | None:
        """:attr:`signatures` as stored (``kla_records.signatures``), None when empty."""
        return json.dumps(list(self.signatures), sort_keys=True) if self.signatures else None


def pq_signature(signer: MlDsaSigner, digest: str) -> dict[str, str]:
    """``{alg, kid, signature}``: ``signer``'s ML-DSA-65 signature over the 32 raw bytes of
    ``digest`` (empty context), unpadded base64url."""
    return {
        "alg": signer.algorithm,
        "kid": signer.kid,
        "signature": b64url(signer.sign(digest_bytes(digest))),
    }


def seal(
    kind: RecordKind,
    record: dict[str, Any],
    *,
    private_key: Ed25519PrivateKey | None = None,
    kid: str | None = None,
    pq_signer: MlDsaSigner | None = None,
) -> SealedRecord:
    """Check a record's shape, compute its digest and, with a key, sign it.

    Raises :class:`~warden.errors.InvalidParams` (reason ``schema_invalid``,
    ``pointer`` in ``data``) when the record does not validate as ``kind``, and
    ``ValueError`` when a private key comes without a kid.
    """
    err = shape_error(record, kind)
    if err is not None:
        raise InvalidParams(
            f"{kind.value} does not validate at {err[0] or '/'}: {err[1]}",
            reason="schema_invalid",
            pointer=err[0],
        )
    digest = record_digest(record)
    extra = (pq_signature(pq_signer, digest),) if pq_signer is not None else ()
    if private_key is None:
        return SealedRecord(kind, record, digest, signatures=extra)
    if not kid:
        raise ValueError("a signed record needs the kid of its key")
    return SealedRecord(kind, record, digest, sign_digest(private_key, digest), kid, extra)


def _dump_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def bundle_manifest(
    records: Iterable[SealedRecord],
    *,
    execution_id: str | None = None,
    chain_head: str | None = None,
    created_at: str | None = None,
    manifest_signer: tuple[str, Ed25519PrivateKey] | None = None,
) -> dict[str, Any]:
    """The ``manifest.json`` object of a bundle of ``records`` (in that order).

    ``bundle_version``, every record's digest in order, ``execution_id``,
    ``chain_head``, ``created_at``; signed by ``manifest_signer`` = ``(kid, key)``
    when given. Raises :class:`~warden.errors.ConfigError` when there is no record
    or the manifest would not validate.
    """
    digests = [s.digest for s in records]
    if not digests:
        raise ConfigError("an evidence bundle needs at least one record")
    manifest: dict[str, Any] = {"bundle_version": BUNDLE_VERSION, "records": digests}
    if execution_id is not None:
        manifest["execution_id"] = execution_id
    if chain_head is not None:
        manifest["chain_head"] = chain_head
    if created_at is not None:
        manifest["created_at"] = created_at
    if manifest_signer is not None:
        kid, key = manifest_signer
        manifest["signature"] = sign_digest(key, manifest_digest(manifest))
        manifest["kid"] = kid
    err = kla_schemas().first_error(BUNDLE_MANIFEST_SCHEMA, manifest)
    if err is not None:
        raise ConfigError(f"manifest would not validate at {err[0] or '/'}: {err[1]}")
    return manifest


def write_bundle(
    directory: Path,
    records: Iterable[SealedRecord],
    *,
    public_keys: Mapping[str, TrustedKey] | None = None,
    execution_id: str | None = None,
    chain_head: str | None = None,
    created_at: str | None = None,
    manifest_signer: tuple[str, Ed25519PrivateKey] | None = None,
) -> Path:
    """Write an evidence bundle into ``directory`` (created; it must hold no bundle yet).

    Layout (README.md of ``warden/schemas/kla``): ``records.jsonl`` (one
    :meth:`SealedRecord.to_line` per line, in the order given), ``manifest.json``
    (``bundle_version``, every line's digest in order, ``execution_id``,
    ``chain_head``, ``created_at``; signed by ``manifest_signer`` = ``(kid,
    key)`` when given) and ``keys/jwks.json`` with ``public_keys``. Returns
    ``directory``. Raises :class:`~warden.errors.ConfigError` when a bundle is
    already there or there is nothing to write.
    """
    sealed = list(records)
    manifest = bundle_manifest(
        sealed,
        execution_id=execution_id,
        chain_head=chain_head,
        created_at=created_at,
        manifest_signer=manifest_signer,
    )
    # What this run creates, so a failure partway can take it back (decision 1132).
    made = [d for d in (directory, *directory.parents) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / MANIFEST_FILE).exists() or (directory / RECORDS_FILE).exists():
        raise ConfigError(f"{directory} already holds an evidence bundle")
    written: list[Path] = []
    try:
        written.append(directory / RECORDS_FILE)
        with written[-1].open("w", encoding="utf-8", newline="\n") as fh:
            for s in sealed:
                fh.write(_dump_line(s.to_line()) + "\n")
        written.append(directory / MANIFEST_FILE)
        written[-1].write_text(
            json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        if public_keys:
            if not (directory / KEYS_DIR).exists():
                made.insert(0, directory / KEYS_DIR)
                (directory / KEYS_DIR).mkdir()
            jwks = KeyRegistry(public_keys).to_jwks()
            written.append(directory / KEYS_DIR / "jwks.json")
            written[-1].write_text(json.dumps(jwks, indent=2) + "\n", encoding="utf-8")
    except BaseException:
        _take_back(written, made)
        raise
    return directory


def _take_back(files: list[Path], directories: list[Path]) -> None:
    """Remove the ``files`` a failed :func:`write_bundle` wrote, then the ``directories``
    it created (deepest first, each only if now empty), so a re-run is not refused as
    "already holds an evidence bundle". Best effort: the original error is what is raised."""
    for path in files:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    for path in directories:
        with contextlib.suppress(OSError):
            path.rmdir()
