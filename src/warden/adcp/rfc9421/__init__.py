"""AdCP's RFC 9421 HTTP Message Signatures profile (issue 21 item 3).

- :mod:`.target` — the ``@target-uri``/``@authority`` canonicalization every signer and
  verifier applies (``test-vectors/request-signing/canonicalization.json``);
- :mod:`.fields` — Structured Field parsing of ``Signature-Input``, ``Signature`` and
  ``Content-Digest`` (``http-sf``), with the two binary encodings AdCP uses;
- :mod:`.keys` — JWK → public key, and the key-purpose checks of checklist step 8;
- :mod:`.verify` — the verifier checklist (pre-check, steps 1–13) with the stable
  ``request_signature_*`` / ``webhook_signature_*`` error codes;
- :mod:`.sign` — the signer (Warden's webhooks; test clients).

Crypto is ``cryptography``; nothing here touches the store (replay and revocation state
come in through :class:`.verify.VerifierState`).
"""

from __future__ import annotations

from warden.adcp.rfc9421.verify import (
    REQUEST_PROFILE_31,
    REQUEST_PROFILE_32,
    WEBHOOK_PROFILE,
    HttpRequest,
    Profile,
    SignatureRejected,
    Verified,
    verify_request,
)

__all__ = [
    "REQUEST_PROFILE_31",
    "REQUEST_PROFILE_32",
    "WEBHOOK_PROFILE",
    "HttpRequest",
    "Profile",
    "SignatureRejected",
    "Verified",
    "verify_request",
]
