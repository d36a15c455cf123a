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
- **Policy** (setting ``adcp_request_signing``, :func:`decide`, AdCP 3.2's
  ``body-integrity-policy.json``): ``off`` — signature headers are not read and
  ``request_signing`` is not advertised; ``supported`` (``supported_for``) — a signed
  request must verify (a bad signature is never downgraded to its API key), an unsigned
  one authenticates with its API key; ``required`` (``required_for``) — the same, but an
  unsigned call without a valid API key is answered ``request_signature_required`` (to
  make signatures mandatory for an agent, give it no API key); ``warn`` (``warn_for``)
  — a bad signature (not a malformed header pair) falls back to a valid API key, logged.
  ``get_adcp_capabilities`` is always ``supported_for``. In every mode an unsigned call
  registering a ``push_notification_config`` with ``authentication`` is refused
  (``request_signature_required``, negative vector 027): webhook credentials travel
  signed.
- **Profile** (``adcp_signing_profile``): ``3.2`` (RFC 8941 Base64, ``content-digest``
  covered whenever there is a body) or ``3.1`` (legacy Base64URL, digest coverage per
  ``adcp_signing_content_digest``).

A verified signature authenticates the request as the key's agent (an ``agent``
:class:`~warden.identity.api_keys.Identity` whose ``key_id`` is the ``keyid``). An API
key sent beside it must name the same principal, else ``AUTH_INVALID``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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

Mode = Literal["off", "supported", "required", "warn"]
PolicyMode = Literal[
    "supported_for",
    "required_for",
    "warn_for",
    "protocol_methods_supported_for",
    "protocol_methods_required_for",
    "protocol_methods_warn_for",
]
PURGE_EVERY_S = 60
#: Tasks never required to be signed: discovery comes before a caller knows the policy.
UNSIGNED_ALWAYS = frozenset({"get_adcp_capabilities"})
log = logging.getLogger(__name__)


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

    def bucket(self, tasks: Sequence[str], mode: PolicyMode) -> list[str]:
        """The tasks in the capability bucket ``mode`` (``required_for`` …)."""
        return [t for t in tasks if self.policy_mode(t) == mode]

    def capability(self, tasks: Sequence[str]) -> dict[str, Any] | None:
        """The ``request_signing`` block of ``get_adcp_capabilities`` (None when off)."""
        if not self.enabled:
            return None
        digest = self.profile.digest
        return {
            "supported": True,
            "covers_content_digest": "required" if digest == "required_with_body" else digest,
            # Every task verifies a signature it is sent (a superset of the others).
            "supported_for": list(tasks),
            "required_for": self.bucket(tasks, "required_for"),
            "warn_for": self.bucket(tasks, "warn_for"),
        }

    def policy_mode(self, task: str | None) -> PolicyMode:
        """The AdCP capability bucket ``task`` falls in under this process's setting."""
        if task is None or task in UNSIGNED_ALWAYS:
            return "supported_for"
        if self.mode == "required":
            return "required_for"
        if self.mode == "warn":
            return "warn_for"
        return "supported_for"

    def authenticate(
        self,
        *,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        task: str | None,
        arguments: Any,
        fallback: Callable[[], Identity | None],
    ) -> Outcome:
        """Decide who sent one request (:func:`decide` over the real checklist).
        ``fallback`` authenticates the request's API key (None when it has no valid
        one); it is only called when the policy would use it. Raises
        :class:`~warden.errors.StoreUnavailable` (503: fail closed)."""
        self._maybe_purge()
        state = SqlVerifierState(self._store, self.replay_cap, self._clock)
        req = HttpRequest(method, url, tuple(headers), body)
        now = int(self._clock())
        outcome = decide(
            self.policy_mode(task),
            lambda: verify_request(req, self.profile, state, now),
            fallback,
            must_sign=_registers_webhook_auth(arguments),
            prefix=self.profile.prefix,
        )
        if outcome.verified is not None:
            agent = state.agent
            assert agent is not None  # resolve() found the key's agent before it verified
            outcome.identity = Identity(
                key_id=outcome.verified.keyid,
                principal=str(agent[0]),
                role=Role.AGENT,
                groups=stored_strings(agent[2], "an agent row's groups column"),
                budgets=stored_strings(agent[3], "an agent row's budgets column"),
                owner=str(agent[1]),
            )
        if outcome.action == "accept_with_warning":
            log.warning(
                "adcp request signature refused (%s) but accepted on its API key (warn mode)",
                outcome.warning,
            )
        return outcome

    def _maybe_purge(self) -> None:
        now = self._clock()
        with self._lock:
            if now - self._purged < PURGE_EVERY_S:
                return
            self._purged = now
        with self._store.transaction() as tx:
            SqlNonces(tx.cursor, self._store._q).purge(int(now))


@dataclass
class Outcome:
    """What :func:`decide` concluded (the vocabulary of ``body-integrity-policy.json``).

    ``action``: ``accept`` (``source`` says by what), ``accept_with_warning`` (a bad
    signature in ``warn_for``, the API key authenticated; ``warning`` is the code),
    ``reject`` (``error_code``) or ``reject_unauthenticated`` (no usable credential:
    the wire answers ``AUTH_MISSING``/``AUTH_INVALID``). ``verified`` is set only when
    the signature verified (``verified_signer_identity``)."""

    action: Literal["accept", "accept_with_warning", "reject", "reject_unauthenticated"]
    source: Literal["signature", "fallback"] | None = None
    error_code: str | None = None
    message: str = ""
    warning: str | None = None
    verified: Verified | None = None
    identity: Identity | None = None
    rejection: SignatureRejected | None = field(default=None, repr=False)


def decide(
    mode: PolicyMode,
    verify: Callable[[], Verified | None],
    fallback: Callable[[], Identity | None],
    *,
    must_sign: bool = False,
    prefix: str = "request_signature",
) -> Outcome:
    """The AdCP 3.2 body-integrity policy over one request (``body-integrity-policy.json``).

    ``verify`` runs the checklist (None: unsigned; raises
    :class:`~warden.adcp.rfc9421.SignatureRejected`). Rules:

    - a verified signature is accepted as the signer (``source: signature``);
    - a refused signature is refused with its code — never downgraded — except in a
      ``*warn_for`` bucket, where a valid API key is accepted with a warning (without
      one: ``reject_unauthenticated``); a malformed header pair is refused in every
      bucket (downgrade protection);
    - an unsigned request that must be signed (``must_sign``: it registers webhook
      credentials) is refused with ``*_required``; otherwise a valid API key is
      accepted (``source: fallback``, also in ``*required_for``); with no valid key,
      ``*required_for`` answers ``*_required`` and the others ``reject_unauthenticated``.
    """
    try:
        verified = verify()
    except SignatureRejected as exc:
        warn = mode.endswith("warn_for") and not exc.code.endswith("_header_malformed")
        if warn:
            who = fallback()
            if who is not None:
                return Outcome("accept_with_warning", "fallback", warning=exc.code, identity=who)
            return Outcome("reject_unauthenticated", warning=exc.code)
        return Outcome("reject", error_code=exc.code, message=exc.message, rejection=exc)
    if verified is not None:
        return Outcome("accept", "signature", verified=verified)
    required = f"{prefix}_required"
    if must_sign:
        return Outcome(
            "reject", error_code=required, message="webhook credentials must be sent signed"
        )
    who = fallback()
    if who is not None:
        return Outcome("accept", "fallback", identity=who)
    if mode.endswith("required_for"):
        return Outcome("reject", error_code=required, message="this operation requires a signature")
    return Outcome("reject_unauthenticated")


def _registers_webhook_auth(arguments: Any) -> bool:
    """True when the call registers a webhook with the legacy ``authentication`` block:
    its credentials must not travel on an unsigned request (negative vector 027)."""
    if not isinstance(arguments, dict):
        return False
    push = arguments.get("push_notification_config")
    return isinstance(push, dict) and "authentication" in push


__all__ = ["Outcome", "RequestSigning", "SignatureRejected", "SqlVerifierState", "decide"]
