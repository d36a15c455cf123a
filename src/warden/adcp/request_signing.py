"""Inbound AdCP RFC 9421 signed requests on Warden's AdCP wire (``POST /adcp/<task>``
and ``/mcp``): the policy, the verifier state behind the checklist, and who the caller
is once a signature verifies.

- **Keys.** A ``keyid`` resolves to a registered agent's JWK
  (:mod:`warden.identity.signing_keys`); a revoked key or agent answers
  ``request_signature_key_revoked``. Warden's registry is its own revocation list, read
  on every request, so it is never stale.
- **Replay.** Accepted ``(keyid, nonce)`` pairs live in ``adcp_signature_nonces`` until
  the signature's ``expires`` + 60 s: in the database, so a replay is refused after a
  restart and on another replica. The insert is the check (primary key), so two
  replicas racing one nonce accept it once. Expired rows are purged at most once a
  minute per process. ``replay_cap`` bounds the live entries per key (step 9a,
  ``request_signature_rate_abuse``).
- **Policy** (setting ``adcp_request_signing``): ``off`` — signature headers are not
  read and ``request_signing`` is not advertised; ``supported`` — a signed request must
  verify (a bad signature is never downgraded to bearer authentication), an unsigned
  one authenticates with its API key, except a ``push_notification_config`` carrying
  ``authentication`` (negative vector 027); ``required`` — every task but
  ``get_adcp_capabilities`` must be signed (``request_signature_required``).
- **Profile** (``adcp_signing_profile``): ``3.2`` (RFC 8941 Base64, ``content-digest``
  covered whenever there is a body) or ``3.1`` (legacy Base64URL, digest coverage per
  ``adcp_signing_content_digest``).

A verified signature authenticates the request as the key's agent (an ``agent``
:class:`~warden.identity.api_keys.Identity` whose ``key_id`` is the ``keyid``). An API
key sent beside it must name the same principal, else ``AUTH_INVALID``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from warden.adcp.rfc9421 import (
    REQUEST_PROFILE_31,
    REQUEST_PROFILE_32,
    HttpRequest,
    Profile,
    SignatureRejected,
    Verified,
    verify_request,
)
from warden.adcp.rfc9421.verify import DigestPolicy, RevocationStatus
from warden.identity.api_keys import Identity, Role, stored_strings
from warden.store.agents_sql import SqlAgents
from warden.store.api_keys_sql import read_cursor
from warden.store.rfc9421_sql import SqlNonces, SqlSigningKeys

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

Mode = Literal["off", "supported", "required"]
PURGE_EVERY_S = 60
#: Tasks never required to be signed: discovery comes before a caller knows the policy.
UNSIGNED_ALWAYS = frozenset({"get_adcp_capabilities"})


@dataclass(frozen=True)
class SignedCaller:
    """A verified signature: the ``identity`` it authenticates and the ``verified``
    details (keyid, nonce, covered components)."""

    identity: Identity
    verified: Verified


class SqlVerifierState:
    """:class:`~warden.adcp.rfc9421.verify.VerifierState` over Warden's store: keys from
    ``adcp_signing_keys`` (with their agent), replay entries in
    ``adcp_signature_nonces``. Remembers which agent the last resolved key belongs to
    (one state per request)."""

    def __init__(self, store: SqlStore, cap: int, clock: Callable[[], float]) -> None:
        self._store = store
        self._cap = cap
        self._clock = clock
        self.agent: tuple[Any, ...] | None = None
        self._revoked = False

    def resolve(self, keyid: str) -> Mapping[str, Any] | None:
        with read_cursor(self._store) as cur:
            row = SqlSigningKeys(cur, self._store._q).key(keyid)
            agent = SqlAgents(cur, self._store._q).agent(row[1]) if row is not None else None
        if row is None or agent is None:
            return None
        self.agent = agent
        self._revoked = row[4] is not None or agent[5] is not None
        jwk: dict[str, Any] = json.loads(row[2])
        return jwk

    def revocation(self, keyid: str, now: int) -> RevocationStatus:
        return "revoked" if self._revoked else "ok"

    def cap_reached(self, keyid: str, now: int) -> bool:
        with read_cursor(self._store) as cur:
            return SqlNonces(cur, self._store._q).live(keyid, now, self._cap) >= self._cap

    def remember(self, keyid: str, nonce: str, until: int) -> bool:
        now = int(self._clock())
        with self._store.transaction() as tx:
            return SqlNonces(tx.cursor, self._store._q).remember(keyid, nonce, until, now)


class RequestSigning:
    """The inbound policy of one Warden process (see the module docstring)."""

    def __init__(
        self,
        store: SqlStore,
        *,
        mode: Mode = "supported",
        profile: Literal["3.1", "3.2"] = "3.2",
        content_digest: DigestPolicy = "required",
        replay_cap: int = 1_000_000,
        mutating_tasks: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.mode = mode
        self.profile: Profile = (
            REQUEST_PROFILE_32
            if profile == "3.2"
            else REQUEST_PROFILE_31.with_digest(content_digest)
        )
        self.replay_cap = replay_cap
        self.mutating_tasks = tuple(mutating_tasks)
        self._clock = clock
        self._purged = 0.0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def required_for(self, tasks: Sequence[str]) -> list[str]:
        """The tasks whose unsigned calls are refused (``required`` mode: all but
        discovery)."""
        if self.mode != "required":
            return []
        return [t for t in tasks if t not in UNSIGNED_ALWAYS]

    def capability(self, tasks: Sequence[str]) -> dict[str, Any] | None:
        """The ``request_signing`` block of ``get_adcp_capabilities`` (None when off)."""
        if not self.enabled:
            return None
        digest = self.profile.digest
        return {
            "supported": True,
            "covers_content_digest": "required" if digest == "required_with_body" else digest,
            "required_for": self.required_for(tasks),
            "supported_for": [t for t in tasks if t not in UNSIGNED_ALWAYS],
            "profile_version": self.profile.name,
            "algorithms": ["ed25519", "ecdsa-p256-sha256"],
        }

    def verify(
        self,
        *,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        task: str | None,
        arguments: Any,
    ) -> SignedCaller | None:
        """Check one request. None: unsigned and allowed to be (authenticate it with its
        API key); :class:`SignedCaller` for a verified signature. Raises
        :class:`~warden.adcp.rfc9421.SignatureRejected` (401 on the wire) or
        :class:`~warden.errors.StoreUnavailable` (503: fail closed)."""
        if not self.enabled:
            return None
        self._maybe_purge()
        required = (
            self.mode == "required" and task is not None and task not in UNSIGNED_ALWAYS
        ) or _registers_webhook_auth(arguments)
        state = SqlVerifierState(self._store, self.replay_cap, self._clock)
        req = HttpRequest(method, url, tuple(headers), body)
        verified = verify_request(req, self.profile, state, int(self._clock()), required=required)
        if verified is None:
            return None
        agent = state.agent
        assert agent is not None  # resolve() found the key's agent before it verified
        identity = Identity(
            key_id=verified.keyid,
            principal=str(agent[0]),
            role=Role.AGENT,
            groups=stored_strings(agent[2], "an agent row's groups column"),
            budgets=stored_strings(agent[3], "an agent row's budgets column"),
            owner=str(agent[1]),
        )
        return SignedCaller(identity, verified)

    def _maybe_purge(self) -> None:
        now = self._clock()
        with self._lock:
            if now - self._purged < PURGE_EVERY_S:
                return
            self._purged = now
        with self._store.transaction() as tx:
            SqlNonces(tx.cursor, self._store._q).purge(int(now))


def _registers_webhook_auth(arguments: Any) -> bool:
    """True when the call registers a webhook with the legacy ``authentication`` block:
    its credentials must not travel on an unsigned request (negative vector 027)."""
    if not isinstance(arguments, dict):
        return False
    push = arguments.get("push_notification_config")
    return isinstance(push, dict) and "authentication" in push


__all__ = ["RequestSigning", "SignatureRejected", "SignedCaller", "SqlVerifierState"]
