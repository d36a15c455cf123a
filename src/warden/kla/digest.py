"""Record digests and the encodings around them (seed 004 §05, digest verification).

A KLA record's digest is ``"sha256:"`` followed by the lowercase hex SHA-256 of
the RFC 8785 (JCS) canonical UTF-8 bytes of the *whole* record, exactly as
parsed: nothing is removed before hashing, because a record never carries its
own digest or signature (those travel beside it: a CLI argument, an
evidence-bundle line). JCS sorts object keys recursively (by UTF-16 code units),
which is the seed's "keys sorted recursively", and fixes the separators, string
escaping and number form that "sorted keys" alone leaves open.

A detached Ed25519 signature covers the 32 raw digest bytes (not the hex, not
the ``sha256:`` prefix) and is written as unpadded base64url: exactly 86
characters of ``[A-Za-z0-9_-]``. That is the only accepted encoding; standard
base64, padding and non-canonical trailing bits are refused, so one signature
has one spelling. This module holds no keys: signing is in
:mod:`warden.kla.records`, verification in :mod:`warden.kla.verify`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.errors import InvalidRequest

DIGEST_PREFIX = "sha256:"
#: Length of an Ed25519 signature and of its unpadded base64url form.
SIGNATURE_BYTES = 64
SIGNATURE_CHARS = 86

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def record_digest(record: Any) -> str:
    """``sha256:<64 lowercase hex>`` over the RFC 8785 canonical bytes of ``record``.

    ``record`` is a parsed JSON value (parse with
    :func:`warden.crypto.canonical.parse_strict_json`); it is not modified.
    Raises :class:`~warden.errors.InvalidRequest` (reason ``jcs_domain``) when it
    cannot be canonicalized (non-finite or oversized numbers, lone surrogates).
    """
    return DIGEST_PREFIX + hashlib.sha256(canonical_bytes(record)).hexdigest()


def is_digest(value: object) -> bool:
    """True when ``value`` is a well-formed digest string (lowercase hex only)."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def digest_bytes(digest: str) -> bytes:
    """The 32 raw bytes a digest string names: the Ed25519 message.

    Raises :class:`~warden.errors.InvalidRequest` (reason ``bad_digest``) unless
    ``digest`` is ``sha256:`` + 64 lowercase hex characters.
    """
    if not is_digest(digest):
        raise InvalidRequest(
            f"not a record digest (expected sha256: and 64 lowercase hex): {digest!r:.80}",
            reason="bad_digest",
        )
    return bytes.fromhex(digest[len(DIGEST_PREFIX) :])


def encode_signature(signature: bytes) -> str:
    """Unpadded base64url of a 64-byte Ed25519 signature (86 characters)."""
    if len(signature) != SIGNATURE_BYTES:
        raise ValueError(f"an Ed25519 signature is 64 bytes, not {len(signature)}")
    return base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii")


def decode_signature(text: str) -> bytes:
    """The 64 signature bytes of an unpadded base64url string.

    Raises :class:`~warden.errors.InvalidRequest` (reason ``bad_signature_encoding``)
    for anything but exactly 86 base64url characters in canonical form (standard
    base64 ``+``/``/``, ``=`` padding, whitespace and stray trailing bits are all refused).
    """
    if len(text) != SIGNATURE_CHARS or _B64URL.fullmatch(text) is None:
        raise InvalidRequest(
            "a signature is 86 base64url characters without padding "
            f"(got {len(text)} characters{', not base64url' if len(text) == 86 else ''})",
            reason="bad_signature_encoding",
        )
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (
        binascii.Error,
        ValueError,
    ) as exc:  # pragma: no cover - the regex admits only valid text
        raise InvalidRequest("signature is not base64url", reason="bad_signature_encoding") from exc
    if encode_signature(raw) != text:
        raise InvalidRequest(
            "signature is not in canonical base64url form (non-zero trailing bits)",
            reason="bad_signature_encoding",
        )
    return raw


#: Manifest members that carry its signature and are left out of what is signed.
MANIFEST_SIGNATURE_FIELDS = ("signature", "kid")


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The digest an evidence-bundle manifest's signature covers.

    :func:`record_digest` of the manifest without its ``signature`` and ``kid``
    members; ``manifest`` itself is not modified.
    """
    return record_digest({k: v for k, v in manifest.items() if k not in MANIFEST_SIGNATURE_FIELDS})
