"""The transport-free half of the client: one ACS session seen from the agent's side.

:class:`AcsSession` builds signed request envelopes (specs/acs.md §4, §11: HMAC-SHA256
over the JCS of the envelope, key ``HKDF(agent IKM, info=session_id)``) with a fresh
``request_id`` and ``nonce`` each (§12), sends back the last ``chain_hash`` it saw in
``metadata.session_state`` (§10), and checks each answer: the response signature must
verify under the session key, the result must answer this request. The sync and async
clients share it and differ only in how bytes travel.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from warden.client.decision import Decision, Step, decision_of
from warden.client.errors import WardenProtocolError, WardenUnavailable
from warden.crypto.agent_key import AgentCredential, AgentKeyPair, Credential
from warden.crypto.hmac_keys import SessionKeys
from warden.errors import IntegrityError, IntegrityReason
from warden.timestamps import utc_millis as now_rfc3339
from warden.wire.acs.client import DEFAULT_METHODS, verify_response
from warden.wire.acs.signing import (
    sign_request,
    sign_request_asymmetric,
    verify_response_asymmetric,
)

ACS_VERSION = "0.1.0"
HANDSHAKE = "handshake/hello"
#: Namespace of the ids Warden derives from a session name (the integrations' request ids).
SESSION_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:warden:client-session")
#: Domain separation of a named session's HMAC (decision 1006).
_NAMED_SESSION = b"warden client session name v2\x00"


def session_uuid(name: str | None, credential: Credential) -> str:
    """An ACS ``session_id`` (a UUID, §4) for a framework's session name: the name
    itself when it is a UUID, a fresh UUIDv4 for None, else the first 16 bytes of
    HMAC-SHA256(the credential's secret, name) as a version-4 UUID. The secret is the
    agent's own key material (:func:`credential_secret`), so the same agent always maps
    a name to the same session while another agent cannot compute, hence cannot squat,
    the id (decision 1006; before it, a UUIDv5 of the name anyone could compute)."""
    if name is None:
        return str(uuid.uuid4())
    try:
        return str(uuid.UUID(name))
    except ValueError:
        secret = credential_secret(credential)
        digest = hmac.new(secret, _NAMED_SESSION + name.encode(), hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))


def credential_secret(credential: Credential) -> bytes:
    """The secret a named session is derived under: an HMAC agent's IKM, or an
    ACS-Crypto agent's private key as PKCS#8 DER (both only in the agent's key file)."""
    if isinstance(credential, AgentCredential):
        return credential.ikm
    from cryptography.hazmat.primitives import serialization  # only for a named session

    return bytes(
        credential.private_key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@dataclass(frozen=True)
class Prepared:
    """A signed request ready to send: its ``request_id``, the ``step`` it carries and
    the JSON ``body``."""

    request_id: str
    step: Step
    body: bytes


class AcsSession:
    """Envelopes and answers of one ACS session under a registered agent's credential.

    ``session_id`` is the ACS session (see :func:`session_uuid`); ``established`` turns
    true after a ServerHello, or when Warden says this session already negotiated
    (another process of the same agent opened it: Claude Code runs one hook process per
    event).
    """

    def __init__(
        self,
        credential: Credential,
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.credential = credential
        self.session_id = session_uuid(session_id, credential)
        #: HMAC session key; empty for an ACS-Crypto credential (issue 21), whose
        #: requests are signed with its private key and answers checked with Warden's key.
        self.key = (
            SessionKeys(credential.ikm).key_for(self.session_id)
            if isinstance(credential, AgentCredential)
            else b""
        )
        self.metadata = dict(metadata or {})
        self.chain_hash: str | None = None
        self.established = False
        self.server_hello: dict[str, Any] | None = None

    def prepare(
        self,
        method: str,
        payload: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> Prepared:
        """A signed envelope for ``method`` with ``payload``; ``metadata`` adds members
        to ``params.metadata`` (``turn_id``, ``user_context`` …). ``request_id`` (a
        UUID, used once: it is the replay key) defaults to a fresh UUIDv4."""
        rid = request_id or str(uuid.uuid4())
        extra = {**self.metadata, **(metadata or {})}
        meta: dict[str, Any] = {
            **extra,
            "agent_id": self.credential.agent_id,
            "session_id": self.session_id,
        }
        if self.chain_hash is not None and method != HANDSHAKE:
            meta["session_state"] = {"chain_hash": self.chain_hash}
        envelope = {
            "jsonrpc": "2.0",
            "method": method,
            "id": rid,
            "params": {
                "acs_version": ACS_VERSION,
                "request_id": rid,
                "timestamp": now_rfc3339(),
                "nonce": secrets.token_hex(16),
                "metadata": meta,
                "payload": payload,
            },
        }
        cred = self.credential
        if isinstance(cred, AgentKeyPair):
            signed = sign_request_asymmetric(
                envelope, cred.algorithm, cred.private_key, cred.key_id
            )
        else:
            signed = sign_request(envelope, self.key, cred.key_id)
        body = json.dumps(signed, ensure_ascii=False, separators=(",", ":")).encode()
        return Prepared(rid, Step(method, payload, extra), body)

    def hello(self) -> Prepared:
        """The ``handshake/hello`` (ClientHello, §6) this client sends: every hook,
        HTTP, no provenance."""
        return self.prepare(
            HANDSHAKE,
            {
                "acs_versions_supported": [ACS_VERSION],
                "methods_implemented": [m for m in DEFAULT_METHODS if m.startswith("steps/")],
                "transports_supported": ["http"],
                "provenance_producer": "none",
                "profiles_supported": (
                    ["acs-core", "acs-crypto"]
                    if isinstance(self.credential, AgentKeyPair)
                    else ["acs-core"]
                ),
            },
        )

    def read_hello(self, response: Any) -> None:
        """Accept a ServerHello, or the refusal that says the session already
        negotiated; raise otherwise."""
        try:
            result = self._result(response)
        except WardenProtocolError as exc:
            if exc.error_reason == "renegotiation_not_supported":
                self.established = True
                return
            raise
        self.server_hello = result
        self.established = True

    def read(self, prepared: Prepared, response: Any) -> Decision:
        """The Decision in a verified ``response`` to ``prepared``.

        Raises :class:`WardenProtocolError` (an error answer),
        :class:`WardenUnavailable` (not a JSON-RPC response) or
        :class:`~warden.errors.IntegrityError` (unsigned result, a signature that does
        not verify, or an answer to another request).
        """
        result = self._result(response)
        if result.get("request_id") != prepared.request_id:
            raise IntegrityError(
                "the answer is for another request",
                reason=IntegrityReason.SIGNATURE_INVALID,
                session_id=self.session_id,
            )
        if isinstance(result.get("chain_hash"), str):
            self.chain_hash = result["chain_hash"]
        return decision_of(result, prepared.step)

    def _result(self, response: Any) -> dict[str, Any]:
        if not isinstance(response, dict) or ("result" in response) == ("error" in response):
            raise WardenUnavailable("Warden's answer is not a JSON-RPC response")
        member = "result" if "result" in response else "error"
        inner = response[member]
        if not isinstance(inner, dict):
            raise WardenUnavailable(f"Warden's answer has a malformed {member}")
        signed = isinstance(inner.get("signature"), dict)
        cred = self.credential
        if isinstance(cred, AgentKeyPair):
            good = verify_response_asymmetric(response, cred.warden_key)
        else:
            good = verify_response(response, self.key)
        if signed and not good:
            raise IntegrityError(
                "Warden's answer is signed with another key",
                reason=IntegrityReason.SIGNATURE_INVALID,
                session_id=self.session_id,
            )
        if member == "error":
            # Unsigned errors come before authentication (-32004 …): either way no
            # decision was made, so the step is refused.
            data = inner.get("data")
            raise WardenProtocolError(
                f"Warden refused the request: {inner.get('message', '')} "
                f"(code {inner.get('code')})",
                code=int(inner.get("code", 0)),
                data=data if isinstance(data, dict) else None,
            )
        if not signed:
            raise IntegrityError(
                "Warden's answer carries no signature",
                reason=IntegrityReason.SIGNATURE_INVALID,
                session_id=self.session_id,
            )
        return inner
