"""The verifier's key registry: trusted Ed25519 public keys by key id.

Seed 004 §05 step 06: a detached signature's public key is resolved
independently, from a registry the caller governs; a key is never taken from
the record it verifies. A :class:`KeyRegistry` is loaded from one of

- a **JWKS** file (RFC 7517 ``{"keys": [...]}``), each key an RFC 8037 OKP
  key: ``kty`` ``OKP``, ``crv`` ``Ed25519``, ``x`` the 32-byte public key as
  unpadded base64url, and a ``kid``. ``use`` (if present) must be ``sig``,
  ``alg`` (if present) ``EdDSA`` or ``Ed25519``, ``key_ops`` (if present) must
  include ``verify``. A key with ``d`` (private material) is refused.
- an RFC 9964 ML-DSA-65 key (issue 21): ``kty`` ``AKP``, ``alg`` ``ML-DSA-65``,
  ``pub`` the 1952-byte public key as unpadded base64url, and a ``kid``.
- a **PEM** file holding one SubjectPublicKeyInfo Ed25519 (or ML-DSA-65) public key; its kid
  is the file name without ``.pem``.
- a **directory** of such files: every ``*.pem`` (kid = file stem) and a
  ``jwks.json``, merged; other files are ignored.

Anything else (another key type, a private key, a duplicate kid, an empty
registry, a file over 1 MiB) is refused with :class:`~warden.errors.ConfigError`
at load time, never half-loaded. Looking up a kid the registry does not hold
raises :class:`UnknownKeyId`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA65PublicKey

from warden.crypto.asymmetric import akp_jwk
from warden.crypto.canonical import parse_strict_json
from warden.errors import ConfigError, WardenError

MAX_KEY_FILE_BYTES = 1 << 20
JWKS_FILE_NAME = "jwks.json"
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_ALGS = frozenset({"EdDSA", "Ed25519"})


class UnknownKeyId(WardenError):
    """The registry holds no key with this kid (the signature cannot be trusted)."""

    reason = "unknown_kid"


def _b64url_decode(text: str) -> bytes:
    if _B64URL.fullmatch(text) is None:
        raise ValueError("not unpadded base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != text:
        raise ValueError("not canonical base64url")
    return raw


def _b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


#: A trusted key: Ed25519, or ML-DSA-65 (issue 21: Warden's post-quantum key).
TrustedKey = Ed25519PublicKey | MLDSA65PublicKey


def _akp_key(jwk: dict[str, Any], label: str) -> MLDSA65PublicKey:
    """An RFC 9964 (JOSE ML-DSA) public key: kty AKP, alg ML-DSA-65, ``pub``."""
    if jwk.get("alg") != "ML-DSA-65":
        raise ConfigError(f"{label} is an AKP key with alg={jwk.get('alg')!r}; expected ML-DSA-65")
    if "use" in jwk and jwk["use"] != "sig":
        raise ConfigError(f"{label} has use={jwk['use']!r}; a verification key has use 'sig'")
    pub = jwk.get("pub")
    try:
        if not isinstance(pub, str):
            raise ValueError("missing")
        return MLDSA65PublicKey.from_public_bytes(_b64url_decode(pub))
    except (ValueError, binascii.Error) as exc:
        raise ConfigError(f"{label} has an invalid pub ({exc})") from exc


def public_key_from_jwk(jwk: Any, where: str = "JWK") -> tuple[str, TrustedKey]:
    """``(kid, key)`` from an RFC 8037 Ed25519 public JWK or an RFC 9964 ML-DSA-65 one
    (kty ``AKP``); ConfigError otherwise."""
    if not isinstance(jwk, dict):
        raise ConfigError(f"{where} is not a JSON object")
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not kid:
        raise ConfigError(f"{where} has no kid (every trusted key needs one)")
    label = f"{where} (kid {kid!r})"
    if "d" in jwk or "priv" in jwk:
        raise ConfigError(f"{label} holds private key material; a key registry takes public keys")
    if jwk.get("kty") == "AKP":
        return kid, _akp_key(jwk, label)
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise ConfigError(
            f"{label} is kty={jwk.get('kty')!r} crv={jwk.get('crv')!r}; "
            "only OKP/Ed25519 keys (RFC 8037) are accepted"
        )
    if "use" in jwk and jwk["use"] != "sig":
        raise ConfigError(f"{label} has use={jwk['use']!r}; a verification key has use 'sig'")
    if "alg" in jwk and jwk["alg"] not in _ALGS:
        raise ConfigError(f"{label} has alg={jwk['alg']!r}; expected EdDSA or Ed25519")
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        raise ConfigError(f"{label} has key_ops={ops!r} without 'verify'")
    x = jwk.get("x")
    try:
        if not isinstance(x, str):
            raise ValueError("missing")
        raw = _b64url_decode(x)
    except (ValueError, binascii.Error) as exc:
        raise ConfigError(f"{label} has an invalid x ({exc})") from exc
    if len(raw) != 32:
        raise ConfigError(f"{label} has a {len(raw)}-byte x; an Ed25519 public key is 32 bytes")
    return kid, Ed25519PublicKey.from_public_bytes(raw)


def jwk_for(kid: str, key: TrustedKey) -> dict[str, str]:
    """The RFC 8037 public JWK of an Ed25519 ``key`` (``kty``, ``crv``, ``x``, ``kid``,
    ``use``, ``alg``), or the RFC 9964 one of an ML-DSA-65 key (``kty`` AKP, ``pub``)."""
    if isinstance(key, MLDSA65PublicKey):
        return akp_jwk(kid, key)
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": _b64url_encode(raw),
        "kid": kid,
        "use": "sig",
        "alg": "EdDSA",
    }


def pem_for(key: TrustedKey) -> bytes:
    """SubjectPublicKeyInfo PEM of ``key``."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_KEY_FILE_BYTES:
            raise ConfigError(f"key file {path} is {size} bytes; the limit is {MAX_KEY_FILE_BYTES}")
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"key file {path} cannot be read: {exc.strerror or exc}") from exc


def _load_pem(path: Path, data: bytes) -> TrustedKey:
    if b"PRIVATE KEY" in data:
        raise ConfigError(f"{path} holds a private key; a key registry takes public keys")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{path} is not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey | MLDSA65PublicKey):
        raise ConfigError(
            f"{path} holds a {type(key).__name__}; only Ed25519 and ML-DSA-65 keys are accepted"
        )
    return key


def _load_jwks(path: Path, data: bytes) -> list[tuple[str, TrustedKey]]:
    try:
        doc = parse_strict_json(data)
    except WardenError as exc:
        raise ConfigError(f"{path} is not strict JSON: {exc.message}") from exc
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list):
        raise ConfigError(f'{path} is not a JWKS (expected {{"keys": [...]}})')
    return [public_key_from_jwk(k, f"{path} keys[{i}]") for i, k in enumerate(keys)]


class KeyRegistry:
    """Trusted Ed25519 public keys by kid; read-only once built.

    Build one with :meth:`load` (a JWKS file, a PEM file or a directory) or
    from a mapping. :meth:`get_key` raises :class:`UnknownKeyId` for a kid it
    does not hold; ``kid in registry`` and ``len(registry)`` never raise.
    """

    def __init__(self, keys: Mapping[str, TrustedKey], *, source: str = "") -> None:
        self._keys = dict(keys)
        self.source = source

    @classmethod
    def load(cls, path: Path) -> KeyRegistry:
        """Load trusted keys from a JWKS file, a PEM file or a directory of them.

        Raises :class:`~warden.errors.ConfigError` for a missing, unreadable or
        invalid file, a non-Ed25519 or private key, a duplicate kid, or no key at all.
        """
        pairs: list[tuple[str, TrustedKey]] = []
        if path.is_dir():
            try:
                children = sorted(path.iterdir())
            except OSError as exc:
                raise ConfigError(f"key directory {path} cannot be listed: {exc}") from exc
            for child in children:
                if child.name == JWKS_FILE_NAME and child.is_file():
                    pairs.extend(_load_jwks(child, _read(child)))
                elif child.suffix == ".pem" and child.is_file():
                    pairs.append((child.stem, _load_pem(child, _read(child))))
        elif path.is_file():
            data = _read(path)
            if data.lstrip().startswith(b"-----BEGIN"):
                pairs.append(
                    (path.stem if path.suffix == ".pem" else path.name, _load_pem(path, data))
                )
            else:
                pairs.extend(_load_jwks(path, data))
        else:
            raise ConfigError(f"key registry {path} does not exist")
        keys: dict[str, TrustedKey] = {}
        for kid, key in pairs:
            if kid in keys:
                raise ConfigError(f"key registry {path} names kid {kid!r} twice")
            keys[kid] = key
        if not keys:
            raise ConfigError(f"key registry {path} holds no Ed25519 public key")
        return cls(keys, source=str(path))

    def get_key(self, kid: str) -> TrustedKey:
        """The public key for ``kid``; raises :class:`UnknownKeyId` if absent."""
        try:
            return self._keys[kid]
        except KeyError:
            where = f" {self.source}" if self.source else ""
            raise UnknownKeyId(f"kid {kid!r} is not in the key registry{where}", kid=kid) from None

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def to_jwks(self) -> dict[str, list[dict[str, str]]]:
        """The registry as a JWKS document, keys in kid order."""
        return {"keys": [jwk_for(kid, self._keys[kid]) for kid in sorted(self._keys)]}
