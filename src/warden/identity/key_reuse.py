"""One public key, one registration (decision 620): key material registered once is
never registered again — not for another agent, not under another kid, not after it
was revoked.

Both registries of agents' public keys check here, inside the transaction that inserts
the key: ACS-Crypto keys (``agent_keys.public_key``, :mod:`warden.identity.agents`) and
AdCP RFC 9421 request-signing keys (``adcp_signing_keys.jwk``,
:mod:`warden.identity.signing_keys`). Keys are compared by their canonical form, the
DER SubjectPublicKeyInfo ``cryptography`` writes (its SHA-256 is the fingerprint named
in messages): a PEM, a JWK and a JWKS of the same key are the same key, whatever kid,
``alg`` or extra members they carry.

Why a check and not a unique index: ``adcp_signing_keys`` stores the JWK as text, so a
unique column would need a migration that backfills by parsing every row in Python and
fails on an existing duplicate. Instead the check reads both tables (a handful of rows
per agent) under the writer's lock: on SQLite ``BEGIN IMMEDIATE`` already makes the
transaction the only writer; on PostgreSQL :func:`refuse_registered` first takes a
transaction-scoped advisory lock, so two registrations of one key cannot both pass.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives import serialization

from warden.errors import ConfigError

#: The PostgreSQL advisory lock serialising key registrations ("wkeyreg" in ASCII).
_REGISTRATION_LOCK = 0x776B6579726567


class KeyAlreadyRegistered(ConfigError):
    """This public key is registered already (to some agent, under some id, revoked or
    not). The message names neither: a caller may not learn other agents' keys."""

    reason = "key_already_registered"


def spki_der(key: Any) -> bytes:
    """The DER SubjectPublicKeyInfo of a ``cryptography`` public key (canonical)."""
    der: bytes = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der


def fingerprint(der: bytes) -> str:
    """``sha256:`` + hex SHA-256 of a DER SubjectPublicKeyInfo."""
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _jwk_der(jwk_json: str) -> bytes | None:
    from warden.adcp.rfc9421.keys import KeyUnusable, public_key

    try:
        return spki_der(public_key(json.loads(jwk_json)))
    except (KeyUnusable, ValueError, TypeError):
        return None  # a row that no longer loads matches nothing (and verifies nothing)


def refuse_registered(cur: Any, q: Any, der: bytes, *, postgres: bool) -> None:
    """Raise :class:`KeyAlreadyRegistered` if the key whose SubjectPublicKeyInfo is
    ``der`` is in ``agent_keys`` or ``adcp_signing_keys`` (active or revoked). Call it in
    the transaction that then inserts the key; ``postgres`` takes the advisory lock."""
    if postgres:
        cur.execute(f"SELECT pg_advisory_xact_lock({_REGISTRATION_LOCK})")
    spki = base64.b64encode(der).decode("ascii")
    cur.execute(q("SELECT 1 FROM agent_keys WHERE public_key = ?"), (spki,))
    found = cur.fetchone() is not None
    if not found:
        cur.execute("SELECT jwk FROM adcp_signing_keys")
        found = any(_jwk_der(str(row[0])) == der for row in cur.fetchall())
    if found:
        raise KeyAlreadyRegistered(
            f"public key {fingerprint(der)} is already registered (to an agent, under "
            "another key id, or revoked): a key is registered once and never reused; "
            "generate a new key pair for this registration"
        )
