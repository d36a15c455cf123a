"""An ACS Observed Agent client: builds, signs and sends envelopes; checks answers.

Used by the AgentDojo replay, the benchmarks and the tests; usable by anyone
who wants to talk to Warden from Python. The transport is any callable from
request bytes to the parsed response (HTTP via httpx, or an in-process
:class:`~warden.wire.acs.service.AcsService`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import SessionKeys, hmac_verify
from warden.errors import IntegrityError, IntegrityReason
from warden.json_text import compact_bytes
from warden.timestamps import utc_millis as now_rfc3339
from warden.wire.acs.methods import HOOKS
from warden.wire.acs.signing import (
    sign_request,
    sign_request_asymmetric,
    verify_response_asymmetric,
)

Transport = Callable[[bytes], dict[str, Any]]

DEFAULT_METHODS: tuple[str, ...] = (*HOOKS, "system/ping", "protocols/MCP/*")


def http_transport(url: str, client: httpx.Client | None = None) -> Transport:
    """POST bytes to ``url`` (e.g. ``http://127.0.0.1:8787/acs``) and parse the JSON body."""
    http = client or httpx.Client(timeout=30.0)

    def send(body: bytes) -> dict[str, Any]:
        resp = http.post(url, content=body, headers={"content-type": "application/json"})
        parsed: dict[str, Any] = resp.json()
        return parsed

    return send


def verify_response(response: dict[str, Any], key: bytes) -> bool:
    """True when the response's ``result.signature``/``error.signature`` verifies."""
    member = "result" if "result" in response else "error"
    inner = response.get(member)
    if not isinstance(inner, dict) or not isinstance(inner.get("signature"), dict):
        return False
    stripped = {**response, member: {k: v for k, v in inner.items() if k != "signature"}}
    return hmac_verify(key, canonical_bytes(stripped), str(inner["signature"].get("value", "")))


class AcsClient:
    """One ACS session seen from the Observed Agent's side.

    Every request is HMAC-signed with the session key; every signed answer is
    verified (``IntegrityError`` if it does not verify). ``ikm`` is the agent's key
    material and ``key_id`` names it (a registered agent's credential,
    :meth:`for_agent`; Warden accepts the master IKM only with ``--unsafe-shared-ikm``).
    ``chain_hash`` tracks the Guardian's published head and is sent back in
    ``metadata.session_state`` when ``track_chain`` is on.

    ``in_process``: the transport is this process's own
    :class:`~warden.wire.acs.service.AcsService` (``warden mcp-proxy``). Its answers
    never cross a boundary, so their signatures are not checked again here: an HMAC
    this process computed a moment earlier, checked with the same key material in
    the same memory, proves nothing an in-process change could not also forge (the
    answer must still carry a signature: :class:`~warden.wire.mcp.gateway.Gateway`
    refuses an unsigned one). Requests are signed as always (docs/decisions.md 850).
    """

    def __init__(
        self,
        transport: Transport,
        ikm: bytes,
        *,
        agent_id: str = "observed-agent",
        session_id: str | None = None,
        key_id: str = "client",
        track_chain: bool = True,
        private_key: Any = None,
        algorithm: str | None = None,
        warden_key: Any = None,
        in_process: bool = False,
    ) -> None:
        self.transport = transport
        self.in_process = in_process
        self.session_id = session_id or str(uuid.uuid4())
        self.agent_id = agent_id
        self.key_id = key_id
        self.key = SessionKeys(ikm).key_for(self.session_id) if ikm else b""
        #: ACS-Crypto (issue 21): the agent's private key and its ACS algorithm sign
        #: requests; ``warden_key`` (Warden's published ML-DSA-65 public key) verifies
        #: every answer, which must then be signed asymmetrically.
        self.private_key = private_key
        self.algorithm = algorithm
        self.warden_key = warden_key
        self.track_chain = track_chain
        self.chain_hash: str | None = None

    @classmethod
    def for_public_key(
        cls,
        transport: Transport,
        agent_id: str,
        key_id: str,
        private_key: Any,
        algorithm: str,
        warden_key: Any,
        **kw: Any,
    ) -> AcsClient:
        """An ACS-Crypto client: signs with ``private_key`` (registered as ``key_id`` by
        ``warden agents add --public-key``) and checks answers with ``warden_key``."""
        return cls(
            transport,
            b"",
            agent_id=agent_id,
            key_id=key_id,
            private_key=private_key,
            algorithm=algorithm,
            warden_key=warden_key,
            **kw,
        )

    @classmethod
    def for_agent(cls, transport: Transport, credential: Any, **kw: Any) -> AcsClient:
        """A client signing as a registered agent: ``credential`` is an
        :class:`~warden.identity.agents.AgentCredential` (``agent_id``, ``key_id``, ``ikm``),
        e.g. from :func:`~warden.identity.agents.load_agent_key`."""
        kw.setdefault("agent_id", credential.agent_id)
        return cls(transport, credential.ikm, key_id=credential.key_id, **kw)

    def envelope(
        self,
        method: str,
        payload: dict[str, Any],
        *,
        turn_id: str | None = None,
        request_id: str | None = None,
        timestamp: str | None = None,
        sign: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A signed request envelope; ``metadata`` adds members to ``params.metadata``
        (``user_context``, Warden's ``approval_task_id`` …)."""
        rid = request_id or str(uuid.uuid4())
        metadata = {
            **(metadata or {}),
            "agent_id": self.agent_id,
            "session_id": self.session_id,
        }
        if turn_id is not None:
            metadata["turn_id"] = turn_id
        if self.track_chain and self.chain_hash is not None:
            metadata["session_state"] = {"chain_hash": self.chain_hash}
        env: dict[str, Any] = {
            "jsonrpc": "2.0",
            "method": method,
            "id": rid,
            "params": {
                "acs_version": "0.1.0",
                "request_id": rid,
                "timestamp": timestamp or now_rfc3339(),
                "metadata": metadata,
                "payload": payload,
            },
        }
        if not sign:
            return env
        if self.private_key is not None and self.algorithm is not None:
            return sign_request_asymmetric(env, self.algorithm, self.private_key, self.key_id)
        return sign_request(env, self.key, self.key_id)

    def send(self, envelope: dict[str, Any]) -> dict[str, Any]:
        """Send an envelope; verify and return the response."""
        response = self.transport(compact_bytes(envelope))
        inner = response.get("result") or response.get("error") or {}
        if isinstance(inner, dict) and "signature" in inner:
            if self.in_process:
                ok = True
            elif self.warden_key is not None:
                ok = verify_response_asymmetric(response, self.warden_key)
            else:
                ok = verify_response(response, self.key)
            if not ok:
                raise IntegrityError(
                    "response signature does not verify",
                    reason=IntegrityReason.SIGNATURE_INVALID,
                    session_id=self.session_id,
                )
            if isinstance(inner.get("chain_hash"), str):
                self.chain_hash = inner["chain_hash"]
        return response

    def call(self, method: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.send(self.envelope(method, payload, **kw))

    def hello(
        self,
        methods: Sequence[str] = DEFAULT_METHODS,
        *,
        transports: Sequence[str] = ("http",),
        provenance_producer: str = "none",
        profiles: Sequence[str] = ("acs-core",),
        mcp_version: str | None = "2025-06-18",
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "acs_versions_supported": ["0.1.0"],
            "methods_implemented": list(methods),
            "transports_supported": list(transports),
            "provenance_producer": provenance_producer,
            "profiles_supported": list(profiles),
        }
        if mcp_version is not None:
            payload["wrapped_protocols"] = [{"protocol": "MCP", "version": mcp_version}]
        return self.call("handshake/hello", payload)

    def tool_call(self, name: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """``steps/toolCallRequest`` with arguments wrapped as ``{"value": v}``."""
        payload = {
            "tool": {"name": name},
            "arguments": {k: {"value": v} for k, v in arguments.items()},
        }
        return self.call("steps/toolCallRequest", payload, **kw)
