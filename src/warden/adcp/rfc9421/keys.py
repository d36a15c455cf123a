"""JWKs of the AdCP RFC 9421 profile: which algorithms it allows, what a usable key
looks like (checklist step 8), and the key object ``cryptography`` verifies with.

Allowed ``alg`` sig-params and the JWK each needs (RFC 8037, RFC 7518):

=====================  ==========================================
``ed25519``            ``kty: OKP``, ``crv: Ed25519`` (``alg: EdDSA`` if present)
``ecdsa-p256-sha256``  ``kty: EC``, ``crv: P-256`` (``alg: ES256`` if present)
=====================  ==========================================

A JWK is *usable for a purpose* when its ``adcp_use`` is one the purpose accepts, its
``key_ops`` (if present) include ``verify``, its ``use`` (if present) is ``sig``, its
``kty``/``crv``/``alg`` agree with each other and with the signature's ``alg``, and its
public point decodes. Anything else is ``*_key_purpose_invalid``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

#: ``alg`` sig-param → ``(kty, crv, JWK alg)``.
ALGORITHMS: dict[str, tuple[str, str, str]] = {
    "ed25519": ("OKP", "Ed25519", "EdDSA"),
    "ecdsa-p256-sha256": ("EC", "P-256", "ES256"),
}
#: JWK ``alg`` values and the (kty, crv) they are defined for.
_JWK_ALGS = {"EdDSA": {("OKP", "Ed25519"), ("OKP", "Ed448")}, "ES256": {("EC", "P-256")}}

PublicKey = Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = Ed25519PrivateKey | ec.EllipticCurvePrivateKey


class KeyUnusable(ValueError):
    """The JWK cannot verify this signature (step 8); the message says why."""


def b64url_decode(text: str) -> bytes:
    """Unpadded base64url (RFC 7515 §2); ``ValueError`` if malformed."""
    if not isinstance(text, str) or not text.isascii():
        raise ValueError("not base64url text")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64url: {exc}") from None


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def usable_key(jwk: Mapping[str, Any], alg: str, purposes: Collection[str]) -> PublicKey:
    """The public key of ``jwk`` if it may verify an ``alg`` signature for one of
    ``purposes`` (``adcp_use`` values); :class:`KeyUnusable` otherwise."""
    if jwk.get("adcp_use") not in purposes:
        raise KeyUnusable(f"adcp_use {jwk.get('adcp_use')!r} is not one of {sorted(purposes)}")
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        raise KeyUnusable("key_ops does not include verify")
    if jwk.get("use", "sig") != "sig":
        raise KeyUnusable("use is not sig")
    kty, crv, jwk_alg = jwk.get("kty"), jwk.get("crv"), jwk.get("alg")
    if jwk_alg is not None and (kty, crv) not in _JWK_ALGS.get(str(jwk_alg), set()):
        raise KeyUnusable(f"alg {jwk_alg!r} is impossible with kty {kty!r} crv {crv!r}")
    want = ALGORITHMS.get(alg)
    if want is None or (kty, crv) != want[:2] or jwk_alg not in (None, want[2]):
        raise KeyUnusable(f"the key ({kty} {crv}) cannot verify an {alg!r} signature")
    return public_key(jwk)


def public_key(jwk: Mapping[str, Any]) -> PublicKey:
    """The ``cryptography`` public key of an OKP/Ed25519 or EC/P-256 JWK;
    :class:`KeyUnusable` if its coordinates do not decode to a valid point."""
    try:
        if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
            x = b64url_decode(jwk["x"])
            return Ed25519PublicKey.from_public_bytes(x)
        if jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
            x, y = b64url_decode(jwk["x"]), b64url_decode(jwk["y"])
            if len(x) != 32 or len(y) != 32:
                raise ValueError("P-256 coordinates are 32 bytes")
            numbers = ec.EllipticCurvePublicNumbers(
                int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
            )
            return numbers.public_key()
    except (KeyError, TypeError, ValueError) as exc:
        raise KeyUnusable(f"the key's public point does not decode: {exc}") from None
    raise KeyUnusable(f"unsupported key type {jwk.get('kty')!r}/{jwk.get('crv')!r}")


def verify_signature(key: PublicKey, alg: str, signature: bytes, message: bytes) -> bool:
    """True when ``signature`` over ``message`` verifies (ECDSA as IEEE P1363 r‖s,
    RFC 9421 §3.3.4)."""
    try:
        if alg == "ed25519" and isinstance(key, Ed25519PublicKey):
            key.verify(signature, message)
            return True
        if alg == "ecdsa-p256-sha256" and isinstance(key, ec.EllipticCurvePublicKey):
            if len(signature) != 64:
                return False
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
            return True
    except InvalidSignature:
        return False
    return False


def sign(key: PrivateKey, alg: str, message: bytes) -> bytes:
    """Sign ``message`` (ECDSA output converted to IEEE P1363 r‖s)."""
    if alg == "ed25519" and isinstance(key, Ed25519PrivateKey):
        return key.sign(message)
    if alg == "ecdsa-p256-sha256" and isinstance(key, ec.EllipticCurvePrivateKey):
        r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    raise ValueError(f"cannot sign {alg!r} with a {type(key).__name__}")


def private_key(jwk: Mapping[str, Any], d_field: str = "d") -> PrivateKey:
    """The private key of an OKP/Ed25519 or EC/P-256 JWK whose private scalar is in
    ``d_field`` (the vectors' ``_private_d_for_test_only``)."""
    d = b64url_decode(jwk[d_field])
    if jwk.get("kty") == "OKP":
        return Ed25519PrivateKey.from_private_bytes(d)
    return ec.derive_private_key(int.from_bytes(d, "big"), ec.SECP256R1())


def public_jwk(
    key: PrivateKey | PublicKey, kid: str, adcp_use: str = "request-signing"
) -> dict[str, Any]:
    """The public JWK of ``key`` with ``kid``, ``use: sig``, ``key_ops: [verify]`` and
    ``adcp_use``."""
    pub = (
        key.public_key() if isinstance(key, Ed25519PrivateKey | ec.EllipticCurvePrivateKey) else key
    )
    if isinstance(pub, Ed25519PublicKey):
        raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        base: dict[str, Any] = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw), "alg": "EdDSA"}
    else:
        n = pub.public_numbers()
        base = {
            "kty": "EC",
            "crv": "P-256",
            "x": b64url(n.x.to_bytes(32, "big")),
            "y": b64url(n.y.to_bytes(32, "big")),
            "alg": "ES256",
        }
    return {**base, "kid": kid, "use": "sig", "key_ops": ["verify"], "adcp_use": adcp_use}
