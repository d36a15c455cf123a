"""ACS envelope signatures (spec §10, specs/acs.md §11): HMAC-SHA256 over the JCS of
the envelope with its signature member removed.

For a request that member is ``params.signature``; for a response it is
``result.signature`` or ``error.signature``. The signature covers everything
else, including ``method``, ``session_id``, ``request_id``, ``timestamp`` and
the published ``chain_hash``.

Under ACS-Crypto (issue 21) the same input is signed with an asymmetric algorithm
(:mod:`warden.crypto.asymmetric`): the agent's registered key for requests, Warden's
ML-DSA-65 key for responses; values are standard base64 with padding, as for HMAC.
"""

from __future__ import annotations

import base64
from typing import Any, Protocol

from warden.crypto import asymmetric
from warden.crypto.asymmetric import PublicKey
from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, hmac_sign, hmac_verify
from warden.crypto.jcs_fast import JcsRoute


def request_signing_input(
    envelope: dict[str, Any], *, known_fast: bool = False, within: JcsRoute | None = None
) -> bytes:
    """JCS bytes of a request envelope without ``params.signature``. ``known_fast`` and
    ``within``: as for :func:`~warden.crypto.canonical.canonical_bytes`, of the envelope."""
    params = {k: v for k, v in envelope["params"].items() if k != "signature"}
    return canonical_bytes({**envelope, "params": params}, known_fast=known_fast, within=within)


def verify_request(
    envelope: dict[str, Any],
    key: bytes,
    *,
    known_fast: bool = False,
    signing_input: bytes | None = None,
    within: JcsRoute | None = None,
) -> bool:
    """True when ``params.signature`` is a valid HMAC-SHA256 under ``key``.

    ``known_fast``: the caller found the envelope DIRECT (``jcs_route``/``is_direct_jcs``)
    or float-free (``is_fast_canonical``); ``within``: the route ``jcs_route`` found for
    the envelope; ``signing_input``: the caller already holds
    :func:`request_signing_input`'s bytes (assembled from canonical members).
    """
    sig = envelope["params"].get("signature")
    if not isinstance(sig, dict) or sig.get("algorithm") != HMAC_ALGORITHM:
        return False
    value = sig.get("value")
    if not isinstance(value, str):
        return False
    if signing_input is None:
        signing_input = request_signing_input(envelope, known_fast=known_fast, within=within)
    return hmac_verify(key, signing_input, value)


def sign_response(
    response: dict[str, Any], key: bytes, key_id: str, *, within: JcsRoute | None = None
) -> dict[str, Any]:
    """Return ``response`` with ``result.signature`` or ``error.signature`` set (``within``:
    its JCS route, as for :func:`~warden.crypto.canonical.canonical_bytes`)."""
    member = "result" if "result" in response else "error"
    inner = {k: v for k, v in response[member].items() if k != "signature"}
    unsigned = {**response, member: inner}
    value = hmac_sign(key, canonical_bytes(unsigned, within=within))
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


# -- ACS-Crypto (issue 21): the same signing input, asymmetric algorithms ----------------


class ResponseSigner(Protocol):
    """Warden's asymmetric response key (:class:`warden.crypto.asymmetric.MlDsaSigner`;
    the benchmarks plug an Ed25519 one in for comparison)."""

    @property
    def algorithm(self) -> str: ...

    @property
    def kid(self) -> str: ...

    def sign(self, message: bytes) -> bytes: ...


#: Signature values: padded standard base64, one spelling.
decode_value = asymmetric.decode_b64


def verify_request_asymmetric(
    envelope: dict[str, Any],
    algorithm: str,
    public_key: PublicKey,
    *,
    known_fast: bool = False,
    signing_input: bytes | None = None,
    within: JcsRoute | None = None,
) -> bool:
    """True when ``params.signature`` is a valid ``algorithm`` signature by ``public_key``
    over the same input as HMAC (:func:`request_signing_input`). A signature naming any
    other algorithm (HMAC-SHA256 included: no downgrade) is refused. Public values only,
    so no constant-time concern; the HMAC path keeps its constant-time compare."""
    sig = envelope["params"].get("signature")
    if not isinstance(sig, dict) or sig.get("algorithm") != algorithm:
        return False
    raw = decode_value(sig.get("value"))
    if raw is None:
        return False
    if signing_input is None:
        signing_input = request_signing_input(envelope, known_fast=known_fast, within=within)
    return asymmetric.verify(algorithm, public_key, signing_input, raw)


def response_signing_input(response: dict[str, Any]) -> tuple[str, dict[str, Any], bytes]:
    """``(member, unsigned response, JCS bytes)`` of a response: what its
    ``result.signature`` / ``error.signature`` covers."""
    member = "result" if "result" in response else "error"
    inner = {k: v for k, v in response[member].items() if k != "signature"}
    unsigned = {**response, member: inner}
    return member, unsigned, canonical_bytes(unsigned)


def sign_response_with(response: dict[str, Any], signer: ResponseSigner) -> dict[str, Any]:
    """Return ``response`` signed by Warden's asymmetric key (``key_id`` = its kid)."""
    member, unsigned, message = response_signing_input(response)
    value = base64.b64encode(signer.sign(message)).decode("ascii")
    unsigned[member]["signature"] = {
        "algorithm": signer.algorithm,
        "value": value,
        "key_id": signer.kid,
    }
    return unsigned


def verify_response_asymmetric(response: dict[str, Any], public_key: PublicKey) -> bool:
    """True when the response's signature verifies under ``public_key`` with the
    algorithm it names (which must be the key's)."""
    member = "result" if "result" in response else "error"
    inner = response.get(member)
    if not isinstance(inner, dict) or not isinstance(inner.get("signature"), dict):
        return False
    sig = inner["signature"]
    raw = decode_value(sig.get("value"))
    if raw is None:
        return False
    _, _, message = response_signing_input(response)
    return asymmetric.verify(str(sig.get("algorithm")), public_key, message, raw)


def sign_request_asymmetric(
    envelope: dict[str, Any], algorithm: str, private_key: Any, key_id: str
) -> dict[str, Any]:
    """Client side: ``envelope`` with ``params.signature`` by an agent's private key."""
    params = {k: v for k, v in envelope["params"].items() if k != "signature"}
    unsigned = {**envelope, "params": params}
    raw = asymmetric.sign_with(algorithm, private_key, canonical_bytes(unsigned))
    params["signature"] = {
        "algorithm": algorithm,
        "value": base64.b64encode(raw).decode("ascii"),
        "key_id": key_id,
    }
    return unsigned
