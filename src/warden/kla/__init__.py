"""AI agent action request v1 and the records that follow it (seed 004).

The action request, policy decision, approval event and audit event as JSON
records with ``sha256:`` digests over their RFC 8785 canonical bytes, detached
Ed25519 signatures over the 32 digest bytes, a key registry the verifier holds
(JWKS or PEM), and offline verification of one record or an evidence bundle.
The byte-level choices are listed in ``warden/schemas/kla/README.md``.
"""

from warden.kla.digest import record_digest
from warden.kla.keys import KeyRegistry, UnknownKeyId
from warden.kla.records import (
    SCHEMA_VERSION,
    KlaDecision,
    RecordKind,
    SealedRecord,
    kla_decision,
    seal,
    sign_digest,
    write_bundle,
)
from warden.kla.verify import (
    BundleOutcome,
    BundleProblem,
    VerifyOutcome,
    VerifyStatus,
    verify_bundle,
    verify_record,
    verify_record_value,
    verify_signature,
)

__all__ = [
    "SCHEMA_VERSION",
    "BundleOutcome",
    "BundleProblem",
    "KeyRegistry",
    "KlaDecision",
    "RecordKind",
    "SealedRecord",
    "UnknownKeyId",
    "VerifyOutcome",
    "VerifyStatus",
    "kla_decision",
    "record_digest",
    "seal",
    "sign_digest",
    "verify_bundle",
    "verify_record",
    "verify_record_value",
    "verify_signature",
    "write_bundle",
]
