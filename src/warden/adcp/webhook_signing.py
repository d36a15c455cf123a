"""Warden's outbound webhook signatures under AdCP's RFC 9421 webhook profile
(security.mdx "Webhook callbacks"; ``test-vectors/webhook-signing``).

Every delivery of a webhook whose ``signing`` is ``rfc9421`` carries
``Content-Digest: sha-256=:…:`` (RFC 9530) and a ``sig1`` signature covering
``@method @target-uri @authority content-type content-digest`` with
``tag="adcp/webhook-signing/v1"``, ``alg="ed25519"``, a fresh 128-bit nonce and a
300 s window from the send time. The signature value is unpadded Base64URL: the
webhook-v1 encoding AdCP keeps throughout 3.x.

The key is Warden's own Ed25519 key at ``<data-dir>/request-signing.key`` (PKCS#8
PEM, 0600, created on first start), separate from the governance-token key: a JWK
declares one purpose, and this one is ``adcp_use: request-signing`` (the purpose AdCP
verifiers accept for webhooks). Its public JWK is published beside the governance key
at ``GET /.well-known/jwks.json``; its ``kid`` is derived from the public key (16 hex
of SHA-256), so one key has one kid everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.adcp.rfc9421.keys import public_jwk
from warden.adcp.rfc9421.sign import sign_request
from warden.adcp.rfc9421.verify import WEBHOOK_TAG, HttpRequest
from warden.crypto.ed25519_keys import load_or_create_signing_key, load_signing_key

KEY_FILENAME = "request-signing.key"
WINDOW_S = 300


class WebhookSigner:
    """Signs webhook deliveries with one Ed25519 key. Thread-safe (no mutable state)."""

    def __init__(self, key: Ed25519PrivateKey, kid: str) -> None:
        self._key = key
        self.kid = kid

    def public_jwk(self) -> dict[str, Any]:
        """``{kty: OKP, crv: Ed25519, x, alg: EdDSA, kid, use: sig, key_ops: [verify],
        adcp_use: request-signing}``."""
        return public_jwk(self._key, self.kid, "request-signing")

    def headers(self, url: str, body: bytes, now: int) -> dict[str, str]:
        """The headers of a POST of ``body`` to ``url`` sent at ``now`` (Unix s):
        ``Content-Type``, ``Content-Digest``, ``Signature-Input``, ``Signature``.
        Raises ``ValueError`` for a URL that cannot be canonicalized."""
        req = HttpRequest("POST", url, (("Content-Type", "application/json"),), body)
        signed = sign_request(
            req,
            self._key,
            self.kid,
            alg="ed25519",
            tag=WEBHOOK_TAG,
            created=now,
            expires=now + WINDOW_S,
            legacy_binary=True,
        )
        return dict(signed.headers)


def load_webhook_signer(
    data_dir: Path, key_file: Path | None = None, *, create: bool = True
) -> WebhookSigner:
    """The signer over ``key_file`` (default ``<data_dir>/request-signing.key``),
    generating the key (mode 0600) on first use when ``create``. Raises
    :class:`~warden.errors.ConfigError` for a key file shared with others or not an
    unencrypted PKCS#8 Ed25519 key (or, without ``create``, missing)."""
    path = key_file or data_dir / KEY_FILENAME
    if create:
        key, kid, _created = load_or_create_signing_key(path)
    else:
        key, kid = load_signing_key(path)
    return WebhookSigner(key, kid)
