"""Warden's Ed25519 signing key: what signs the KLA records Warden writes.

The policy decisions, approval events and audit events Warden writes for action
requests, and the manifests of the evidence bundles it exports, carry a detached
Ed25519 signature over their digest (:mod:`warden.kla`). The private key lives in
one file, ``<data-dir>/signing.key`` by default (setting ``signing_key_file``):
an unencrypted PKCS#8 PEM, generated on first start from the OS CSPRNG and
written with mode 0600 like the other secrets (:mod:`warden.crypto.keystore`);
a key file readable or writable by group or others is refused.

The key id (``kid``) is the first 16 lowercase hex characters of SHA-256 over the
32 raw public-key bytes: it is derived, never configured, so one key has one kid
wherever it is published (``GET /v1/keys``, an evidence bundle's ``keys/``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from warden.crypto.keystore import _create_private, _read_private
from warden.errors import ConfigError

KID_HEX_CHARS = 16
WHAT = "signing key file"


def key_id_for(public_key: Ed25519PublicKey) -> str:
    """The kid of ``public_key``: 16 lowercase hex characters of SHA-256(raw public key)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:KID_HEX_CHARS]


def load_signing_key(path: Path) -> tuple[Ed25519PrivateKey, str]:
    """Read Warden's signing key: ``(private key, kid)``.

    Raises :class:`~warden.errors.ConfigError` if the file is missing, shared with
    group or others, unreadable, or not an unencrypted PKCS#8 Ed25519 private key.
    """
    text = _read_private(path, WHAT)
    try:
        key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{WHAT} {path} is not an unencrypted PEM private key (PKCS#8): {exc}"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{WHAT} {path} holds a {type(key).__name__}, not an Ed25519 key")
    return key, key_id_for(key.public_key())


def load_or_create_signing_key(path: Path) -> tuple[Ed25519PrivateKey, str, bool]:
    """Load the signing key at ``path``, creating it (0600, PKCS#8 PEM) if absent.

    Returns ``(private key, kid, created)``.
    """
    if path.exists():
        key, kid = load_signing_key(path)
        return key, kid, False
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        _create_private(path, pem.decode("ascii").strip())
    except FileExistsError:  # another process created it first: use theirs
        key, kid = load_signing_key(path)
        return key, kid, False
    return key, key_id_for(key.public_key()), True
