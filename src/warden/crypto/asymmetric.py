"""Asymmetric signatures for the ACS-Crypto profile (ACS spec §10.1, specs/acs.md §11).

Warden verifies agents' requests signed with

=================  ==========================================================  =======
ACS ``algorithm``  key and signature                                            profile
=================  ==========================================================  =======
``ML-DSA-65``      FIPS 204 ML-DSA-65, empty context, 3309-byte signature        MUST
``ML-DSA-44/87``   FIPS 204, empty context                                      optional
``ECDSA-P256``     ECDSA over P-256 with SHA-256, signature ``r || s`` (64 B)    optional
``RSA-PSS-SHA256`` RSASSA-PSS, SHA-256, MGF1-SHA256, salt 32 bytes, ≥ 2048 bits  optional
=================  ==========================================================  =======

and signs its own responses with ML-DSA-65 (:class:`MlDsaSigner`). SLH-DSA-128s (a
SHOULD) is not offered: ``cryptography`` 50 does not implement SLH-DSA
(docs/decisions.md 541). ``ECDSA-P256`` values are the fixed-width ``r || s`` JOSE
writes (RFC 7518 §3.4), not DER: one signature, one spelling.

Agents' public keys are read from a SubjectPublicKeyInfo PEM or a public JWK (kty
``AKP`` with ``alg`` ``ML-DSA-44/65/87`` per RFC 9964, the JOSE ML-DSA document
published from draft-ietf-cose-dilithium; ``EC``/``P-256``; ``RSA``) and stored as
``(algorithm, base64 SPKI DER)`` (:func:`parse_public_key`, :func:`load_public_key`).

Warden's ML-DSA-65 key is ``<data-dir>/mldsa.key`` by default (setting
``mldsa_key_file``): the PKCS#8 PEM of its 32-byte seed, generated on first start from
the OS CSPRNG with mode 0600 like the other keys (:mod:`warden.crypto.keystore`). Its
``kid`` is the first 16 hex characters of SHA-256 over the raw 1952-byte public key,
derived as for the Ed25519 key (:mod:`warden.crypto.ed25519_keys`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, mldsa, padding, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from warden.crypto.keystore import _create_private, _read_private
from warden.errors import ConfigError

ML_DSA_65 = "ML-DSA-65"
ML_DSA_44 = "ML-DSA-44"
ML_DSA_87 = "ML-DSA-87"
ECDSA_P256 = "ECDSA-P256"
RSA_PSS_SHA256 = "RSA-PSS-SHA256"
#: Not an ACS algorithm: Warden's KLA and checkpoint key type, verified here so that one
#: :func:`verify` serves the offline verifiers and the benchmark's comparison.
ED25519 = "Ed25519"

#: What Warden verifies on ACS requests, ML-DSA-65 first (the ServerHello lists these
#: after HMAC-SHA256).
VERIFIED_ALGORITHMS: tuple[str, ...] = (ML_DSA_65, ML_DSA_44, ML_DSA_87, ECDSA_P256, RSA_PSS_SHA256)

_MLDSA_PUBLIC: dict[str, type[Any]] = {
    ML_DSA_44: mldsa.MLDSA44PublicKey,
    ML_DSA_65: mldsa.MLDSA65PublicKey,
    ML_DSA_87: mldsa.MLDSA87PublicKey,
}
_MIN_RSA_BITS = 2048
_P256_COORD = 32
MAX_PUBLIC_KEY_FILE_BYTES = 64 * 1024
KID_HEX_CHARS = 16
MLDSA_KEY_WHAT = "ML-DSA signing key file"

PublicKey = Any  # one of the key classes above; checked at parse time


def b64url(raw: bytes) -> str:
    """Unpadded base64url (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """Strict unpadded base64url; ValueError otherwise (canonical form only)."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(raw) != text:
        raise ValueError("not canonical unpadded base64url")
    return raw


def decode_b64(value: object) -> bytes | None:
    """The bytes of a signature ``value``: standard base64 with padding, in the one
    spelling :func:`base64.b64encode` writes; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == value else None


def algorithm_of(key: PublicKey) -> str:
    """The ACS algorithm a public key signs with; ConfigError for any other key."""
    for alg, cls in _MLDSA_PUBLIC.items():
        if isinstance(key, cls):
            return alg
    if isinstance(key, Ed25519PublicKey):
        return ED25519
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ConfigError(f"an EC key on {key.curve.name}; ACS ECDSA-P256 needs P-256")
        return ECDSA_P256
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < _MIN_RSA_BITS:
            raise ConfigError(f"a {key.key_size}-bit RSA key; at least {_MIN_RSA_BITS} bits")
        return RSA_PSS_SHA256
    raise ConfigError(
        f"a {type(key).__name__}: ACS-Crypto keys are ML-DSA-44/65/87, ECDSA P-256 or RSA"
    )


def spki_b64(key: PublicKey) -> str:
    """Standard base64 of the key's DER SubjectPublicKeyInfo (how it is stored)."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode("ascii")


def key_from_spki_b64(text: str) -> PublicKey:
    """The public key stored by :func:`spki_b64`; ConfigError if it is not one."""
    try:
        return serialization.load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, TypeError, binascii.Error, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"a stored agent public key does not load: {exc}") from exc


def _from_jwk(jwk: dict[str, Any]) -> PublicKey:
    if any(k in jwk for k in ("d", "priv", "seed", "p", "q")):
        raise ConfigError("the JWK holds private key material; register the public key only")
    kty = jwk.get("kty")
    try:
        if kty == "AKP":
            alg = jwk.get("alg")
            cls = _MLDSA_PUBLIC.get(str(alg))
            if cls is None:
                raise ConfigError(f"an AKP JWK with alg {alg!r}; expected ML-DSA-44/65/87")
            return cls.from_public_bytes(unb64url(str(jwk["pub"])))
        if kty == "EC":
            if jwk.get("crv") != "P-256":
                raise ConfigError(f"an EC JWK on {jwk.get('crv')!r}; ECDSA-P256 needs P-256")
            x, y = unb64url(str(jwk["x"])), unb64url(str(jwk["y"]))
            if len(x) != _P256_COORD or len(y) != _P256_COORD:
                raise ConfigError("a P-256 JWK has 32-byte x and y")
            return ec.EllipticCurvePublicNumbers(
                int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
            ).public_key()
        if kty == "RSA":
            n, e = unb64url(str(jwk["n"])), unb64url(str(jwk["e"]))
            return rsa.RSAPublicNumbers(
                int.from_bytes(e, "big"), int.from_bytes(n, "big")
            ).public_key()
    except (KeyError, ValueError, binascii.Error) as exc:
        raise ConfigError(f"the {kty} JWK is malformed: {exc}") from exc
    raise ConfigError(f"a JWK of kty {kty!r}; ACS-Crypto keys are AKP (ML-DSA), EC or RSA")


def parse_public_key(data: bytes) -> tuple[str, PublicKey]:
    """``(algorithm, key)`` from a SubjectPublicKeyInfo PEM or a public JWK (JSON).

    Raises :class:`ConfigError` for a private key, another key type or curve, an RSA
    key under 2048 bits, or anything that is not one key.
    """
    text = data.strip()
    if b"PRIVATE KEY" in text:
        raise ConfigError("the file holds a private key; register the public key only")
    if text.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise ConfigError(f"not a PEM public key: {exc}") from exc
    else:
        try:
            jwk = json.loads(text)
        except ValueError as exc:
            raise ConfigError("neither a PEM public key nor a JWK (JSON)") from exc
        if not isinstance(jwk, dict):
            raise ConfigError("a JWK is a JSON object")
        key = _from_jwk(jwk)
    algorithm = algorithm_of(key)
    if algorithm not in VERIFIED_ALGORITHMS:
        raise ConfigError(
            f"an {algorithm} key: ACS-Crypto keys are {', '.join(VERIFIED_ALGORITHMS)}"
        )
    return algorithm, key


def load_public_key(path: Path) -> tuple[str, PublicKey]:
    """:func:`parse_public_key` of a file; ConfigError if it cannot be read."""
    try:
        if path.stat().st_size > MAX_PUBLIC_KEY_FILE_BYTES:
            raise ConfigError(f"public key file {path} is over {MAX_PUBLIC_KEY_FILE_BYTES} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"public key file {path} cannot be read: {exc.strerror or exc}") from exc
    try:
        return parse_public_key(data)
    except ConfigError as exc:
        raise ConfigError(f"public key file {path}: {exc.message}") from exc


def verify(algorithm: str, key: PublicKey, message: bytes, signature: bytes) -> bool:
    """True iff ``signature`` is ``algorithm``'s valid signature of ``message`` by ``key``.

    The algorithm must be the key's own (no algorithm confusion); a malformed
    signature is a failed verification, never an exception.
    """
    try:
        if algorithm_of(key) != algorithm:
            return False
    except ConfigError:
        return False
    try:
        if algorithm in _MLDSA_PUBLIC or algorithm == ED25519:
            key.verify(signature, message)
        elif algorithm == ECDSA_P256:
            if len(signature) != 2 * _P256_COORD:
                return False
            r = int.from_bytes(signature[:_P256_COORD], "big")
            s = int.from_bytes(signature[_P256_COORD:], "big")
            key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
        elif algorithm == RSA_PSS_SHA256:
            key.verify(signature, message, _pss(), hashes.SHA256())
        else:
            return False
    except (InvalidSignature, ValueError):
        return False
    return True


def _pss() -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)


def sign_with(algorithm: str, private_key: Any, message: bytes) -> bytes:
    """Sign ``message`` (the client side: tests, benchmarks, the Python client)."""
    if algorithm == ECDSA_P256:
        r, s = decode_dss_signature(private_key.sign(message, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(_P256_COORD, "big") + s.to_bytes(_P256_COORD, "big")
    if algorithm == RSA_PSS_SHA256:
        return bytes(private_key.sign(message, _pss(), hashes.SHA256()))
    return bytes(private_key.sign(message))


def key_id_for(public_raw: bytes) -> str:
    """A derived kid: 16 lowercase hex characters of SHA-256(raw public key)."""
    return hashlib.sha256(public_raw).hexdigest()[:KID_HEX_CHARS]


def akp_jwk(kid: str, public: mldsa.MLDSA65PublicKey) -> dict[str, str]:
    """The public JWK of an ML-DSA-65 key (RFC 9964: kty ``AKP``, ``alg``, ``pub``)."""
    return {
        "kty": "AKP",
        "alg": ML_DSA_65,
        "pub": b64url(public.public_bytes_raw()),
        "kid": kid,
        "use": "sig",
    }


@dataclass(frozen=True)
class MlDsaSigner:
    """Warden's ML-DSA-65 key: signs ACS responses of ACS-Crypto sessions and, when the
    ``evidence_signing_keys`` setting names it, checkpoints and KLA records."""

    key: mldsa.MLDSA65PrivateKey
    kid: str

    algorithm = ML_DSA_65

    @property
    def public_key(self) -> mldsa.MLDSA65PublicKey:
        return self.key.public_key()

    def sign(self, message: bytes) -> bytes:
        """The 3309-byte ML-DSA-65 signature of ``message`` (empty context)."""
        return self.key.sign(message)

    def jwk(self) -> dict[str, str]:
        return akp_jwk(self.kid, self.public_key)

    @classmethod
    def generate(cls) -> MlDsaSigner:
        key = mldsa.MLDSA65PrivateKey.generate()
        return cls(key, key_id_for(key.public_key().public_bytes_raw()))


def load_mldsa_key(path: Path) -> MlDsaSigner:
    """Read Warden's ML-DSA-65 key file; ConfigError if missing, shared, or not an
    unencrypted PKCS#8 ML-DSA-65 private key."""
    text = _read_private(path, MLDSA_KEY_WHAT)
    try:
        key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{MLDSA_KEY_WHAT} {path} is not a PKCS#8 PEM key: {exc}") from exc
    if not isinstance(key, mldsa.MLDSA65PrivateKey):
        raise ConfigError(f"{MLDSA_KEY_WHAT} {path} holds a {type(key).__name__}, not ML-DSA-65")
    return MlDsaSigner(key, key_id_for(key.public_key().public_bytes_raw()))


def load_or_create_mldsa_key(path: Path) -> tuple[MlDsaSigner, bool]:
    """Load Warden's ML-DSA-65 key at ``path``, creating it (0600, PKCS#8 PEM) if absent.
    Returns ``(signer, created)``."""
    if path.exists():
        return load_mldsa_key(path), False
    signer = MlDsaSigner.generate()
    pem = signer.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        _create_private(path, pem.decode("ascii").strip())
    except FileExistsError:  # another replica created it first: use theirs
        return load_mldsa_key(path), False
    return signer, True
