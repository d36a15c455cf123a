"""AI agent action request v1 and the records that follow it (seed 004).

The action request, policy decision, approval event and audit event as JSON
records with ``sha256:`` digests over their RFC 8785 canonical bytes, detached
Ed25519 signatures over the 32 digest bytes, a key registry the verifier holds
(JWKS or PEM), and offline verification of one record or an evidence bundle.
The byte-level choices are listed in ``warden/schemas/kla/README.md``.

Names are imported on first use (PEP 562), as in :mod:`warden`: importing a submodule
(:mod:`warden.kla.kinds`, which ``warden verify-record --kind`` needs to build its
option) does not load cryptography and the schemas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warden.kla.digest import record_digest
    from warden.kla.keys import KeyRegistry, UnknownKeyId
    from warden.kla.kinds import RecordKind
    from warden.kla.records import (
        SCHEMA_VERSION,
        KlaDecision,
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

#: public name → module
_EXPORTS: dict[str, str] = {
    "SCHEMA_VERSION": "warden.kla.records",
    "BundleOutcome": "warden.kla.verify",
    "BundleProblem": "warden.kla.verify",
    "KeyRegistry": "warden.kla.keys",
    "KlaDecision": "warden.kla.records",
    "RecordKind": "warden.kla.kinds",
    "SealedRecord": "warden.kla.records",
    "UnknownKeyId": "warden.kla.keys",
    "VerifyOutcome": "warden.kla.verify",
    "VerifyStatus": "warden.kla.verify",
    "kla_decision": "warden.kla.records",
    "record_digest": "warden.kla.digest",
    "seal": "warden.kla.records",
    "sign_digest": "warden.kla.records",
    "verify_bundle": "warden.kla.verify",
    "verify_record": "warden.kla.verify",
    "verify_record_value": "warden.kla.verify",
    "verify_signature": "warden.kla.verify",
    "write_bundle": "warden.kla.records",
}

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


def __getattr__(name: str) -> Any:
    """Import a public name on first use and keep it (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'warden.kla' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
