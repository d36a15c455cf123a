"""Cryptographic building blocks: canonical JSON, digests, HKDF/HMAC, key files.

Everything here wraps a maintained library (rfc8785, cryptography); foreign
exceptions are translated to :mod:`warden.errors` at this boundary.
"""

from warden.crypto.canonical import canonical_bytes, parse_strict_json, sha256_hex
from warden.crypto.hmac_keys import SessionKeys, hmac_sign, hmac_verify
from warden.crypto.keystore import load_or_create_ikm

__all__ = [
    "SessionKeys",
    "canonical_bytes",
    "hmac_sign",
    "hmac_verify",
    "load_or_create_ikm",
    "parse_strict_json",
    "sha256_hex",
]
