"""Issuing AdCP ``governance_context`` tokens (the AdCP JWS profile, specs/adcp-spend-kla.md §1.7).

An approved ``check_governance`` returns a compact JWS signed with Warden's governance
key (Ed25519, ``alg: EdDSA``). The protected header is, in this order::

    {"alg": "EdDSA", "kid": <kid>, "typ": "adcp-gov+jws",
     "crit": [<each authorization claim present>], <marker>: true, ...}

where the markers and ``crit`` entries are exactly the authorization-changing claims
the token carries (``authorized_commitment``, ``authorized_task``,
``authorized_payload_hash``; task and payload hash always as a pair). The claims are
serialized as ``JSON.stringify`` would (insertion order, no spaces, UTF-8), in the order
of the published vectors: ``iss, sub, plan_hash, aud, iat, nbf, exp, jti, phase,
caller, check_id, media_buy_id, authorized_commitment, authorized_task,
authorized_payload_hash, policy_decisions | policy_decision_hash, …``. With the vector
key and claims, :meth:`GovernanceSigner.issue` reproduces
``governance-authorization.json`` byte for byte (Ed25519 signatures are deterministic).

The key is its own file, ``<data-dir>/governance-signing.key`` by default
(:data:`GOVERNANCE_KEY_FILENAME`): PKCS#8 PEM, created on first use with mode 0600 by
:mod:`warden.crypto.ed25519_keys`, refused if shared with group or others. Its ``kid``
is derived from the public key (16 hex characters of SHA-256), so it is stable across
restarts. :meth:`GovernanceSigner.jwks` is the JWKS sellers fetch, served at
``/.well-known/jwks.json`` on the governance agent's origin.

Nothing here verifies tokens for a seller: that is :mod:`warden.adcp.token_verifier`,
which shares no code with this module beyond the hash functions.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from warden.adcp._jose import CRITICAL_CLAIMS, ProfileRegistry
from warden.adcp.plan_hash import authorized_payload_hash, plan_hash
from warden.crypto.ed25519_keys import load_or_create_signing_key, load_signing_key

__all__ = [
    "GOVERNANCE_KEY_FILENAME",
    "GOVERNANCE_TYP",
    "MAX_EXECUTION_TTL_SECONDS",
    "MAX_INTENT_TTL_SECONDS",
    "Commitment",
    "GovernancePhase",
    "GovernanceSigner",
    "PolicyDecision",
    "authorized_payload_hash",
    "load_governance_signer",
    "new_jti",
    "plan_hash",
    "sign_compact",
]

GOVERNANCE_TYP: Final = "adcp-gov+jws"
GOVERNANCE_ALG: Final = "EdDSA"
GOVERNANCE_KEY_FILENAME: Final = "governance-signing.key"
#: Intent tokens SHOULD last at most 15 minutes; execution tokens MUST last at most 30 days.
MAX_INTENT_TTL_SECONDS: Final = 15 * 60
MAX_EXECUTION_TTL_SECONDS: Final = 30 * 24 * 3600
#: ``governance_context`` is printable ASCII, 1..4096 characters (protocol-envelope.json).
MAX_TOKEN_CHARS: Final = 4096

GovernancePhase = Literal["intent", "purchase", "modification", "delivery"]
_PHASES: frozenset[str] = frozenset({"intent", "purchase", "modification", "delivery"})
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_B64_SHA256 = re.compile(r"^[A-Za-z0-9_-]{43}$")
_REGISTRY = ProfileRegistry([GOVERNANCE_ALG])


@dataclass(frozen=True)
class Commitment:
    """A monetary amount: ``{"amount": <number ≥ 0>, "currency": <ISO 4217>}``.

    ``amount`` may be an int, a finite float or a :class:`~decimal.Decimal`; a Decimal
    is written as an integer when integral, else as the float that reads back to it
    exactly (``ValueError`` if none does: JSON numbers are doubles on the AdCP wire).
    """

    amount: int | float | Decimal
    currency: str

    def __post_init__(self) -> None:
        a = self.amount
        if isinstance(a, bool) or not isinstance(a, int | float | Decimal):
            raise TypeError("commitment amount must be a number")
        finite = a.is_finite() if isinstance(a, Decimal) else math.isfinite(a)
        if not finite or a < 0:
            raise ValueError("commitment amount must be finite and non-negative")
        if not isinstance(self.currency, str) or not _CURRENCY.match(self.currency):
            raise ValueError("commitment currency must be an ISO 4217 code (^[A-Z]{3}$)")

    def to_json(self) -> dict[str, Any]:
        """The claim value ``{"amount": …, "currency": …}``."""
        return {"amount": _json_number(self.amount), "currency": self.currency}


def _json_number(a: int | float | Decimal) -> int | float:
    if not isinstance(a, Decimal):
        return a
    if a == a.to_integral_value():
        return int(a)
    f = float(a)
    if Decimal(repr(f)) != a:
        raise ValueError(f"amount {a} has no exact JSON (double) representation")
    return f


@dataclass(frozen=True)
class PolicyDecision:
    """One entry of the ``policy_decisions`` claim: ``{policy_id, outcome, confidence?}``."""

    policy_id: str
    outcome: str
    confidence: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"policy_id": self.policy_id, "outcome": self.outcome}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        return out


def new_jti() -> str:
    """A fresh ``jti``: a UUID version 7 (48-bit Unix milliseconds, then 74 random bits),
    as the profile recommends: unique, and sortable by issue time."""
    ms = time.time_ns() // 1_000_000
    value = (ms & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 9562 variant
    return str(uuid.UUID(int=value))


def _compact_json(obj: Mapping[str, Any]) -> bytes:
    # JSON.stringify: insertion order, no whitespace, UTF-8 (not \u-escaped), no NaN.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sign_compact(
    key: Ed25519PrivateKey, protected_header: Mapping[str, Any], claims: Mapping[str, Any]
) -> str:
    """Sign ``claims`` under ``protected_header`` exactly as given: a compact JWS.

    Low level: both objects are serialized in insertion order and nothing about the
    AdCP profile is checked except that the header's ``alg`` is ``EdDSA`` and that
    every ``crit`` name is a boolean header present (so the vectors' unknown critical
    extension can be reproduced). Use :meth:`GovernanceSigner.issue` to mint
    tokens; this is what it calls, and what the conformance vectors are signed with.
    Raises ``ValueError`` if joserfc refuses the header.
    """
    header = dict(protected_header)
    crit = header.get("crit")
    registry = _REGISTRY
    if isinstance(crit, list) and not set(crit) <= set(CRITICAL_CLAIMS):
        registry = ProfileRegistry([GOVERNANCE_ALG], [*CRITICAL_CLAIMS, *map(str, crit)])
    try:
        return jws.serialize_compact(
            header, _compact_json(claims), OKPKey.import_key(key), registry=registry
        )
    except JoseError as exc:
        raise ValueError(f"cannot sign governance token: {exc}") from exc


class GovernanceSigner:
    """Warden's governance-token issuer: one Ed25519 key, its ``kid``, and ``iss``.

    ``issuer`` is the governance agent's HTTPS URL as listed in buyers' ``brand.json``
    (the ``iss`` claim; sellers byte-compare it). Thread-safe: it holds no mutable state.
    """

    def __init__(self, key: Ed25519PrivateKey, kid: str, issuer: str) -> None:
        if not kid:
            raise ValueError("kid must be non-empty")
        if not issuer:
            raise ValueError("issuer must be non-empty")
        self._key = key
        self.kid = kid
        self.issuer = issuer

    def public_jwk(self) -> dict[str, Any]:
        """The public JWK: ``{kty: OKP, crv: Ed25519, x, kid, alg: EdDSA, use: sig,
        key_ops: [verify], adcp_use: governance-signing}`` (what verifiers need at §1.7
        steps 5–6)."""
        jwk = OKPKey.import_key(self._key.public_key()).as_dict(private=False)
        return {
            "kty": jwk["kty"],
            "crv": jwk["crv"],
            "x": jwk["x"],
            "kid": self.kid,
            "alg": GOVERNANCE_ALG,
            "use": "sig",
            "key_ops": ["verify"],
            "adcp_use": "governance-signing",
        }

    def jwks(self) -> dict[str, Any]:
        """The JWKS to publish (``{"keys": [public_jwk]}``), at ``/.well-known/jwks.json``."""
        return {"keys": [self.public_jwk()]}

    def issue(
        self,
        *,
        sub: str,
        aud: str,
        caller: str,
        check_id: str,
        plan_hash: str,
        phase: GovernancePhase = "intent",
        ttl_seconds: int | None = None,
        now: int | None = None,
        exp: int | None = None,
        nbf: int | None = None,
        jti: str | None = None,
        media_buy_id: str | None = None,
        authorized_commitment: Commitment | None = None,
        authorized_task: str | None = None,
        authorized_payload_hash: str | None = None,
        policy_decisions: Sequence[PolicyDecision] | None = None,
        policy_decision_hash: str | None = None,
        runtime_attestation_binding_digest: str | None = None,
        audit_log_pointer: str | None = None,
    ) -> str:
        """Sign a ``governance_context`` token and return it (compact JWS, ASCII).

        - ``sub``: the action's opaque binding (stable across its lifecycle, not the plan id);
          ``aud``: the seller's URL (``target_agent``); ``caller``: who asked for the check.
        - ``iat`` is ``now`` (default: the current time, whole seconds); ``exp`` is
          ``exp`` if given, else ``iat + ttl_seconds`` (default 15 minutes for
          ``intent``, 30 days otherwise); ``nbf`` only if given.
        - ``jti`` defaults to :func:`new_jti`.
        - ``authorized_task`` and ``authorized_payload_hash`` come together or not at all;
          ``media_buy_id`` is required for ``modification``/``delivery`` and refused for
          ``intent``. ``policy_decisions`` xor ``policy_decision_hash`` may be given.

        Raises ``ValueError`` when the claims would break the profile (empty required
        claim, unknown phase, lifetime beyond 30 days for an execution token or not
        positive, a lone task/payload-hash binding, a hash that is not 43 base64url
        characters, a token over 4096 characters).
        """
        iat = int(time.time()) if now is None else now
        if exp is None:
            ttl = ttl_seconds
            if ttl is None:
                ttl = MAX_INTENT_TTL_SECONDS if phase == "intent" else MAX_EXECUTION_TTL_SECONDS
            exp = iat + ttl
        for name, value in (
            ("sub", sub), ("aud", aud), ("caller", caller),
            ("check_id", check_id), ("plan_hash", plan_hash),
        ):  # fmt: skip
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string")
        if phase not in _PHASES:
            raise ValueError(f"phase must be one of {sorted(_PHASES)}")
        if exp <= iat:
            raise ValueError("exp must be after iat")
        if phase != "intent" and exp - iat > MAX_EXECUTION_TTL_SECONDS:
            raise ValueError("an execution token must not last more than 30 days")
        if (authorized_task is None) != (authorized_payload_hash is None):
            raise ValueError("authorized_task and authorized_payload_hash come as a pair")
        if authorized_task is not None and not authorized_task:
            raise ValueError("authorized_task must be non-empty")
        for name, digest in (
            ("plan_hash", plan_hash),
            ("authorized_payload_hash", authorized_payload_hash),
        ):
            if digest is not None and not _B64_SHA256.match(digest):
                raise ValueError(f"{name} must be a base64url SHA-256 (43 characters)")
        if phase == "intent" and media_buy_id is not None:
            raise ValueError("an intent token carries no media_buy_id")
        if phase in ("modification", "delivery") and not media_buy_id:
            raise ValueError(f"a {phase} token requires media_buy_id")
        if policy_decisions is not None and policy_decision_hash is not None:
            raise ValueError("give policy_decisions or policy_decision_hash, not both")

        claims: dict[str, Any] = {"iss": self.issuer, "sub": sub, "plan_hash": plan_hash}
        claims["aud"] = aud
        claims["iat"] = iat
        if nbf is not None:
            claims["nbf"] = nbf
        claims["exp"] = exp
        claims["jti"] = new_jti() if jti is None else jti
        claims["phase"] = phase
        claims["caller"] = caller
        claims["check_id"] = check_id
        if media_buy_id is not None:
            claims["media_buy_id"] = media_buy_id
        if authorized_commitment is not None:
            claims["authorized_commitment"] = authorized_commitment.to_json()
        if authorized_task is not None:
            claims["authorized_task"] = authorized_task
            claims["authorized_payload_hash"] = authorized_payload_hash
        if policy_decisions is not None:
            claims["policy_decisions"] = [d.to_json() for d in policy_decisions]
        if policy_decision_hash is not None:
            claims["policy_decision_hash"] = policy_decision_hash
        if runtime_attestation_binding_digest is not None:
            claims["runtime_attestation_binding_digest"] = runtime_attestation_binding_digest
        if audit_log_pointer is not None:
            claims["audit_log_pointer"] = audit_log_pointer
        if not claims["jti"]:
            raise ValueError("jti must be non-empty")

        critical = [name for name in CRITICAL_CLAIMS if name in claims]
        header: dict[str, Any] = {"alg": GOVERNANCE_ALG, "kid": self.kid, "typ": GOVERNANCE_TYP}
        if critical:
            header["crit"] = critical
            header.update({name: True for name in critical})
        token = sign_compact(self._key, header, claims)
        if len(token) > MAX_TOKEN_CHARS:
            raise ValueError(f"token is {len(token)} characters; governance_context allows 4096")
        return token


def load_governance_signer(
    data_dir: Path, issuer: str, key_file: Path | None = None, *, create: bool = True
) -> GovernanceSigner:
    """The signer for ``issuer`` over the key at ``key_file`` (default
    ``<data_dir>/governance-signing.key``), generating the key (mode 0600) on first use
    when ``create`` (``warden doctor`` reads it with ``create=False``: a missing file is
    then a ConfigError).

    Raises :class:`~warden.errors.ConfigError` if the key file exists but is shared with
    group or others, unreadable, or not an unencrypted PKCS#8 Ed25519 key.
    """
    path = key_file if key_file is not None else data_dir / GOVERNANCE_KEY_FILENAME
    if create:
        key, kid, _created = load_or_create_signing_key(path)
    else:
        key, kid = load_signing_key(path)
    return GovernanceSigner(key, kid, issuer)
