"""Who signed an ACS request: the registered agent behind its ``key_id`` (issue 15).

The signature names the key: ``{algorithm, value, key_id}`` (ACS v0.1.3) or, in the v0.1
bare form ``{algorithm, value}``, ``params.metadata.key_id`` (signed there); naming two
different keys is refused (-32004). A registered, active agent key's ``key_id`` selects
its material (derived from the master IKM; :mod:`warden.identity.agents`); the master
IKM's session keys only with ``--unsafe-shared-ikm``, every decision they sign marked
``policy_data.unsafe_shared_ikm``. Lookups are cached maps: no query per request."""

from __future__ import annotations

from dataclasses import dataclass
from threading import Lock
from typing import Any

from warden.core.types import Principal
from warden.crypto.asymmetric import PublicKey
from warden.crypto.hmac_keys import AGENT_KEY_SCHEME, HMAC_ALGORITHM, SessionKeys
from warden.identity.agents import Agent, AgentRegistry

#: How a session created with the master IKM records its scheme.
SHARED_IKM_SCHEME = "shared-ikm"
#: How an ACS-Crypto session (an agent's registered public key, issue 21) records it.
PUBLIC_KEY_SCHEME = "warden/public-key/v1"


@dataclass(frozen=True)
class Caller:
    """The authenticated signer of one request.

    ``key`` is the 32-byte session key that verifies the request and signs the answer;
    ``agent`` the verified registered agent (None only under the shared IKM, when
    ``shared`` is True and nothing about the caller is verified beyond the IKM). An
    ACS-Crypto caller (issue 21) has no session key (``key`` empty) but its registered
    ``public_key`` and ``algorithm``; Warden answers it with its own ML-DSA-65 key.
    """

    key: bytes
    key_id: str
    agent: Agent | None
    shared: bool = False
    algorithm: str = HMAC_ALGORITHM
    public_key: PublicKey | None = None

    @property
    def crypto(self) -> bool:
        """True for an ACS-Crypto caller (asymmetric signatures both ways)."""
        return self.public_key is not None

    @property
    def agent_key(self) -> str | None:
        """The registered key to re-check in the write transaction (None when shared)."""
        return self.key_id if self.agent is not None else None

    def may_see(self, session_agent: str) -> bool:
        """False for another registered agent's session: answered as a missing one."""
        return self.agent is None or self.agent.agent_id == session_agent

    def principal(self) -> Principal:
        """The caller as the pipeline's stage 1 (:class:`~warden.core.pipeline.Principal`)."""
        if self.agent is None:
            return Principal("shared_ikm", "", self.key_id)
        return Principal("agent", self.agent.agent_id, self.key_id, self.agent.facts())

    def identity_record(self) -> dict[str, Any]:
        """What the session record keeps about its signer (``negotiated.identity``):
        ``{scheme, agent_id?, owner?}``; ``warden verify`` derives the response keys by it."""
        if self.agent is None:
            return {"scheme": SHARED_IKM_SCHEME}
        if self.crypto:
            return {
                "scheme": PUBLIC_KEY_SCHEME,
                "algorithm": self.algorithm,
                "agent_id": self.agent.agent_id,
                "owner": self.agent.owner,
            }
        return {
            "scheme": AGENT_KEY_SCHEME,
            "agent_id": self.agent.agent_id,
            "owner": self.agent.owner,
        }


def request_key_id(params: dict[str, Any]) -> str | None:
    """The key a request names: ``signature.key_id`` (v0.1.3), else ``metadata.key_id``
    (v0.1 bare form). None when neither names one or they name different keys."""
    sig = params.get("signature")
    in_sig = sig.get("key_id") if isinstance(sig, dict) else None
    meta = params.get("metadata")
    in_meta = meta.get("key_id") if isinstance(meta, dict) else None
    if isinstance(in_sig, str) and isinstance(in_meta, str) and in_sig != in_meta:
        return None
    found = in_sig if isinstance(in_sig, str) else in_meta
    return found if isinstance(found, str) else None


class CallerKeys:
    """Resolves a request's ``key_id`` to its :class:`Caller`. Thread-safe.

    ``registry`` None means no registry at all (library use): every request is treated
    as signed with the shared IKM, which then needs ``unsafe_shared_ikm``.
    """

    def __init__(
        self,
        registry: AgentRegistry | None,
        master: SessionKeys,
        *,
        unsafe_shared_ikm: bool = False,
    ) -> None:
        self.registry = registry
        self.master = master
        self.unsafe_shared_ikm = unsafe_shared_ikm
        self._keys: dict[str, SessionKeys] = {}
        self._lock = Lock()

    def resolve(self, key_id: str, session_id: str) -> Caller | None:
        """The caller signing with ``key_id`` in ``session_id``, or None (unknown or
        revoked key, and the shared IKM not allowed)."""
        agent = self.registry.resolve(key_id) if self.registry is not None else None
        if agent is not None:
            assert self.registry is not None
            public = self.registry.public_key(key_id)
            if public is not None:
                return Caller(b"", key_id, agent, algorithm=public[0], public_key=public[1])
            with self._lock:
                keys = self._keys.get(key_id)
            if keys is None:
                keys = SessionKeys(self.registry.session_ikm(key_id))
                with self._lock:
                    self._keys[key_id] = keys
            return Caller(keys.key_for(session_id), key_id, agent)
        if self.unsafe_shared_ikm:
            return Caller(self.master.key_for(session_id), key_id, None, shared=True)
        return None

    def forget(self, key_id: str) -> None:
        """Drop ``key_id`` everywhere (its revocation was seen in a transaction)."""
        with self._lock:
            self._keys.pop(key_id, None)
        if self.registry is not None:
            self.registry.forget(key_id)
