"""The two hashes the AdCP JWS profile binds: the plan hash and the authorized payload hash.

Both are ``base64url_no_pad(SHA-256(JCS(object − excluded top-level members)))``
(specs/adcp-spend-kla.md §1.7; the ``plan-hash/`` and ``governance-authorization.json``
vectors of compliance 3.2.0-beta.0). JCS is RFC 8785 through
:func:`warden.crypto.canonical.canonical_bytes`, so floats, escapes and non-ASCII keys
canonicalize exactly; omitted and explicit ``null`` members hash differently, array
order is kept, and ``ext`` is hashed like any other member.

- :func:`plan_hash` — the ``plan_hash`` claim (audit layer only; sellers don't check it):
  the plan minus the governance agent's bookkeeping
  (:data:`PLAN_HASH_EXCLUDED`, a closed list).
- :func:`authorized_payload_hash` — the ``authorized_payload_hash`` claim: the exact
  downstream request minus top-level ``governance_context`` and ``context``
  (:data:`PAYLOAD_HASH_EXCLUDED`). Unlike the idempotency request hash (§1.5),
  ``idempotency_key`` IS hashed, so a token binds one attempt of one request.

Neither function imports the signer or the verifier: both sides of the profile use them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.errors import InvalidRequest

#: Top-level plan members a governance agent strips before hashing (closed list, §1.7).
PLAN_HASH_EXCLUDED: frozenset[str] = frozenset(
    {"version", "status", "syncedAt", "revisionHistory", "committedBudget", "committedByType"}
)

#: Top-level request members left out of ``authorized_payload_hash`` (closed list, §1.7).
PAYLOAD_HASH_EXCLUDED: frozenset[str] = frozenset({"governance_context", "context"})


def b64url_sha256(data: bytes) -> str:
    """``base64url`` without padding of SHA-256(``data``): 43 characters."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _without(obj: Mapping[str, Any], excluded: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise InvalidRequest(f"{what} must be a JSON object", reason="jcs_domain")
    return {k: v for k, v in obj.items() if k not in excluded}


def plan_preimage(plan: Mapping[str, Any]) -> bytes:
    """The JCS bytes hashed into :func:`plan_hash` (the plan minus bookkeeping).

    Raises :class:`~warden.errors.InvalidRequest` (reason ``jcs_domain``) if ``plan`` is
    not an object or holds values outside the JCS domain (NaN, integers beyond 2^53...).
    """
    return canonical_bytes(_without(plan, PLAN_HASH_EXCLUDED, "plan"))


def plan_hash(plan: Mapping[str, Any]) -> str:
    """The ``plan_hash`` claim of a plan as synced (``sync_plans`` ``plans[]`` item).

    Returns 43 base64url characters. Raises :class:`~warden.errors.InvalidRequest` as
    :func:`plan_preimage` does.
    """
    return b64url_sha256(plan_preimage(plan))


def payload_preimage(payload: Mapping[str, Any]) -> bytes:
    """The JCS bytes hashed into :func:`authorized_payload_hash`."""
    return canonical_bytes(_without(payload, PAYLOAD_HASH_EXCLUDED, "payload"))


def authorized_payload_hash(payload: Mapping[str, Any]) -> str:
    """The ``authorized_payload_hash`` claim for the downstream request ``payload``
    (the exact task arguments the seller will receive, ``idempotency_key`` included).

    Returns 43 base64url characters. Raises :class:`~warden.errors.InvalidRequest`
    (reason ``jcs_domain``) if ``payload`` is not an object or is outside the JCS domain.
    """
    return b64url_sha256(payload_preimage(payload))
