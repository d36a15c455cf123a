"""ACS envelope signatures (spec §10, specs/acs.md §11): HMAC-SHA256 over the JCS of
the envelope with its signature member removed.

For a request that member is ``params.signature``; for a response it is
``result.signature`` or ``error.signature``. The signature covers everything
else, including ``method``, ``session_id``, ``request_id``, ``timestamp`` and
the published ``chain_hash``.
"""

from __future__ import annotations

from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, hmac_sign, hmac_verify


def request_signing_input(envelope: dict[str, Any], *, known_fast: bool = False) -> bytes:
    """JCS bytes of a request envelope without ``params.signature``."""
    params = {k: v for k, v in envelope["params"].items() if k != "signature"}
    return canonical_bytes({**envelope, "params": params}, known_fast=known_fast)


def verify_request(
    envelope: dict[str, Any],
    key: bytes,
    *,
    known_fast: bool = False,
    signing_input: bytes | None = None,
) -> bool:
    """True when ``params.signature`` is a valid HMAC-SHA256 under ``key``.

    ``known_fast``: the caller found the envelope DIRECT (``jcs_route``/``is_direct_jcs``)
    or float-free (``is_fast_canonical``); ``signing_input``: the caller already holds
    :func:`request_signing_input`'s bytes (assembled from canonical members).
    """
    sig = envelope["params"].get("signature")
    if not isinstance(sig, dict) or sig.get("algorithm") != HMAC_ALGORITHM:
        return False
    value = sig.get("value")
    if not isinstance(value, str):
        return False
    if signing_input is None:
        signing_input = request_signing_input(envelope, known_fast=known_fast)
    return hmac_verify(key, signing_input, value)


def sign_response(response: dict[str, Any], key: bytes, key_id: str) -> dict[str, Any]:
    """Return ``response`` with ``result.signature`` or ``error.signature`` set."""
    member = "result" if "result" in response else "error"
    inner = {k: v for k, v in response[member].items() if k != "signature"}
    unsigned = {**response, member: inner}
    value = hmac_sign(key, canonical_bytes(unsigned))
    inner["signature"] = {"algorithm": HMAC_ALGORITHM, "value": value, "key_id": key_id}
    return unsigned


def sign_request(envelope: dict[str, Any], key: bytes, key_id: str) -> dict[str, Any]:
    """Client side: return ``envelope`` with ``params.signature`` set (used by the replay
    client, the benchmarks and tests)."""
    params = {k: v for k, v in envelope["params"].items() if k != "signature"}
    unsigned = {**envelope, "params": params}
    value = hmac_sign(key, canonical_bytes(unsigned))
    params["signature"] = {"algorithm": HMAC_ALGORITHM, "value": value, "key_id": key_id}
    return unsigned
