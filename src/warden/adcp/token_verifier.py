"""The seller-side verifier of ``governance_context`` tokens: the 15 ordered steps of the
AdCP JWS profile (specs/adcp-spend-kla.md §1.7).

A seller that receives a governed request (``create_media_buy`` with a
``governance_context`` on its envelope, …) calls :meth:`GovernanceTokenVerifier.verify`
before doing anything. The steps run in the profile's order and stop at the first
failure, raising :class:`GovernanceTokenRejected` with the failed
:class:`VerificationStep` and the profile's error code (:class:`GovernanceErrorCode`);
the seller answers ``PERMISSION_DENIED`` and never echoes the detail:

====  ====================  ===============================================================
step  name                  fails with
====  ====================  ===============================================================
1     PARSE                 ``governance_token_invalid``: not a compact JWS of two JSON
                            objects, ≤ 4096 chars; a required claim missing or malformed
2     ALGORITHM             ``governance_token_invalid``: ``alg`` not in the allow-list
                            (``EdDSA``, ``ES256``; never ``none``/``HS*``/``RS*``)
3     TYPE                  ``governance_token_invalid``: ``typ`` ≠ ``adcp-gov+jws`` exactly
4     CRITICAL              ``governance_token_invalid``: an unknown ``crit`` name; a claim,
                            its ``true`` marker and its ``crit`` entry not all present or
                            all absent; ``authorized_task`` without ``authorized_payload_hash``
                            or the reverse
5     KEY_RESOLUTION        ``governance_jwks_unavailable`` / ``governance_jwks_untrusted`` /
                            ``governance_key_unknown`` (kid absent after one refresh)
6     KEY_PURPOSE           ``governance_key_unknown``: the JWK is not ``use: sig`` with
                            ``verify`` in ``key_ops``, is for another purpose or algorithm
7     SIGNATURE             ``governance_token_invalid``
8     AUDIENCE              ``governance_token_not_applicable``: ``aud`` ≠ this seller's URL,
                            or ``caller`` ≠ the transport-authenticated caller
9     TIME                  ``governance_token_expired`` (``exp`` + skew < now), then
                            ``governance_token_not_yet_valid`` (``iat`` > now + skew or
                            ``nbf`` − skew > now), then ``governance_token_invalid`` if
                            ``exp`` ≤ ``iat`` or an execution token outlives 30 days
10    SUBJECT               ``governance_token_invalid`` (empty ``sub``) /
                            ``governance_token_not_applicable`` (≠ the continuation's ``sub``)
11    PHASE                 ``governance_token_not_applicable``: ``phase`` ≠ the gate's phase
12    ACTION_BINDING        ``governance_token_not_applicable``: task, payload hash,
                            ``media_buy_id``, commitment currency or ceiling (including a
                            monetary action whose token has no ``authorized_commitment``)
13    ISSUER_AUTHORIZED     ``governance_issuer_not_authorized``: ``iss`` not among the
                            authenticated buyer's governance agents (its ``brand.json``)
14    REVOCATION            ``governance_token_revoked`` / ``governance_revocation_stale``
15    REPLAY                ``governance_token_replayed``: ``(iss, aud, jti)`` seen before
====  ====================  ===============================================================

Trust material comes in through two small interfaces: a :class:`JwksResolver` (issuer →
JWKS; :class:`StaticJwks` holds them in memory, no network) and a :class:`JtiReplayStore`
(:class:`InMemoryJtiReplayStore`; a shared store, e.g. SQL or Redis ``SET NX EX``, is
needed when several seller processes verify). The revocation list, when the issuer
publishes one, comes from a callable ``issuer → RevocationList``.

This module imports nothing from the signer (:mod:`warden.adcp.governance_token`): the
two meet only in the published vectors and the hash functions of
:mod:`warden.adcp.plan_hash`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any, Final, Protocol

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry

from warden.adcp._jose import CRITICAL_CLAIMS, ProfileRegistry
from warden.adcp.plan_hash import authorized_payload_hash
from warden.crypto.canonical import parse_strict_json
from warden.errors import WardenError

__all__ = [
    "ALLOWED_ALGORITHMS",
    "GovernanceErrorCode",
    "GovernanceTokenRejected",
    "GovernanceTokenVerifier",
    "InMemoryJtiReplayStore",
    "JtiReplayStore",
    "JwksResolver",
    "JwksUnavailable",
    "JwksUntrusted",
    "RevocationList",
    "StaticJwks",
    "VerificationStep",
    "VerifiedGovernanceToken",
]

TYP: Final = "adcp-gov+jws"
#: The explicit algorithm allow-list (§1.7 step 2).
ALLOWED_ALGORITHMS: Final = ("EdDSA", "ES256")
_KEY_SHAPE: Final = {"EdDSA": ("OKP", "Ed25519"), "ES256": ("EC", "P-256")}
MAX_TOKEN_CHARS: Final = 4096
MAX_JWKS_BYTES: Final = 64 * 1024
MAX_EXECUTION_TTL_SECONDS: Final = 30 * 24 * 3600
PHASES: Final = frozenset({"intent", "purchase", "modification", "delivery"})
_EXECUTION_PHASES: Final = frozenset({"purchase", "modification", "delivery"})

_COMPACT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_B64_SHA256 = re.compile(r"^[A-Za-z0-9_-]{43}$")


class GovernanceErrorCode(StrEnum):
    """The profile's verification failure codes (§1.7, "Failure codes")."""

    JWKS_UNAVAILABLE = "governance_jwks_unavailable"
    JWKS_UNTRUSTED = "governance_jwks_untrusted"
    KEY_UNKNOWN = "governance_key_unknown"
    TOKEN_INVALID = "governance_token_invalid"
    TOKEN_EXPIRED = "governance_token_expired"
    TOKEN_REPLAYED = "governance_token_replayed"
    TOKEN_NOT_YET_VALID = "governance_token_not_yet_valid"
    TOKEN_REVOKED = "governance_token_revoked"
    ISSUER_NOT_AUTHORIZED = "governance_issuer_not_authorized"
    REVOCATION_STALE = "governance_revocation_stale"
    TOKEN_NOT_APPLICABLE = "governance_token_not_applicable"


class VerificationStep(IntEnum):
    """The 15 seller verification steps, in the order they run (§1.7)."""

    PARSE = 1
    ALGORITHM = 2
    TYPE = 3
    CRITICAL = 4
    KEY_RESOLUTION = 5
    KEY_PURPOSE = 6
    SIGNATURE = 7
    AUDIENCE = 8
    TIME = 9
    SUBJECT = 10
    PHASE = 11
    ACTION_BINDING = 12
    ISSUER_AUTHORIZED = 13
    REVOCATION = 14
    REPLAY = 15


class GovernanceTokenRejected(WardenError):
    """A ``governance_context`` failed verification at ``step`` with ``code``.

    The AdCP answer is ``PERMISSION_DENIED``; put ``code`` in it at most, never
    ``message`` (the detail is for the seller's operators, §1.7 "never echo").
    """

    def __init__(self, step: VerificationStep, code: GovernanceErrorCode, detail: str) -> None:
        super().__init__(f"step {int(step)} ({step.name.lower()}): {detail}", reason=code.value)
        self.step = step
        self.code = code


class JwksUnavailable(WardenError):
    """Raised by a :class:`JwksResolver` that could not get the issuer's JWKS (retry later)."""

    reason = GovernanceErrorCode.JWKS_UNAVAILABLE.value


class JwksUntrusted(WardenError):
    """Raised by a :class:`JwksResolver` for an issuer whose JWKS cannot be trusted
    (not resolvable through ``brand.json``, failed the SSRF rules, …)."""

    reason = GovernanceErrorCode.JWKS_UNTRUSTED.value


class JwksResolver(Protocol):
    """Issuer URL → its JWKS (``{"keys": [...]}``), §1.7 step 5.

    ``refresh=True`` asks to bypass a cache: the verifier does it at most once per token,
    when the ``kid`` is not in the set (the resolver applies the 30 s cooldown). Raise
    :class:`JwksUnavailable` (transient) or :class:`JwksUntrusted`. Must be thread-safe.
    """

    def resolve(self, issuer: str, *, refresh: bool = False) -> Mapping[str, Any]: ...


class StaticJwks:
    """A :class:`JwksResolver` over JWKS held in memory, keyed by exact issuer URL
    (tests, or a seller that pins its governance agents' keys). An issuer it does not
    hold is :class:`JwksUntrusted`. ``refresh`` changes nothing."""

    def __init__(self, jwks_by_issuer: Mapping[str, Mapping[str, Any]]) -> None:
        self._jwks = dict(jwks_by_issuer)

    def resolve(self, issuer: str, *, refresh: bool = False) -> Mapping[str, Any]:
        try:
            return self._jwks[issuer]
        except KeyError:
            raise JwksUntrusted(f"no JWKS known for issuer {issuer!r}") from None


class JtiReplayStore(Protocol):
    """Consumed ``(iss, aud, jti)`` tuples, §1.7 step 15.

    :meth:`consume` atomically records the tuple until ``expires_at`` (epoch seconds)
    and returns True, or returns False if it is already recorded and unexpired — except
    that a tuple recorded with a non-None ``idempotency_key`` is consumed again (True)
    by the same key: the retry of one in-flight request (§1.6, "a repeated jti is
    accepted only for the same in-flight idempotency_key"). Must be safe under
    concurrent calls: of two racing first consumptions exactly one returns True.
    """

    def consume(
        self,
        *,
        issuer: str,
        audience: str,
        jti: str,
        expires_at: float,
        now: float,
        idempotency_key: str | None = None,
    ) -> bool: ...


class InMemoryJtiReplayStore:
    """A process-local :class:`JtiReplayStore` (one lock; expired tuples are dropped as
    they are met and on every 1024th consumption). Not shared between processes."""

    _SWEEP_EVERY = 1024

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str], tuple[float, str | None]] = {}
        self._lock = threading.Lock()
        self._count = 0

    def consume(
        self,
        *,
        issuer: str,
        audience: str,
        jti: str,
        expires_at: float,
        now: float,
        idempotency_key: str | None = None,
    ) -> bool:
        key = (issuer, audience, jti)
        with self._lock:
            self._count += 1
            if self._count % self._SWEEP_EVERY == 0:
                self._seen = {k: v for k, v in self._seen.items() if v[0] > now}
            prior = self._seen.get(key)
            if prior is not None and prior[0] > now:
                return prior[1] is not None and prior[1] == idempotency_key
            self._seen[key] = (expires_at, idempotency_key)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


@dataclass(frozen=True)
class RevocationList:
    """An issuer's verified ``governance-revocations.json`` (§1.7): the revoked ``jti``
    and ``kid`` values, and when it must next be refreshed. Past ``next_update`` +
    ``grace_seconds`` (the profile says 4 × the polling interval) it is stale, and
    purchase / modification / delivery tokens are refused."""

    revoked_jtis: frozenset[str] = frozenset()
    revoked_kids: frozenset[str] = frozenset()
    next_update: float | None = None
    grace_seconds: float = 0.0


@dataclass(frozen=True)
class VerifiedGovernanceToken:
    """A token that passed all 15 steps: its protected header and claims, as signed."""

    header: Mapping[str, Any]
    claims: Mapping[str, Any]

    @property
    def iss(self) -> str:
        return str(self.claims["iss"])

    @property
    def sub(self) -> str:
        return str(self.claims["sub"])

    @property
    def jti(self) -> str:
        return str(self.claims["jti"])

    @property
    def phase(self) -> str:
        return str(self.claims["phase"])

    @property
    def check_id(self) -> str:
        return str(self.claims["check_id"])


@dataclass
class _Token:
    """What step 1 parsed; the later steps fill ``jwk``."""

    raw: str
    header: dict[str, Any]
    claims: dict[str, Any]
    jwk: dict[str, Any] = field(default_factory=dict)


def _number(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (isinstance(value, int) or math.isfinite(value))
    )


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _commitment_problem(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return "is not an object"
    amount: Any = value.get("amount")
    if not _number(amount) or amount < 0:
        return "has no finite non-negative amount"
    if not isinstance(value.get("currency"), str) or not _CURRENCY.match(value["currency"]):
        return "has no ISO 4217 currency"
    return None


def _decimal(amount: int | float) -> Decimal:
    # repr() is the shortest string that reads back to the same double: 1.01 stays 1.01.
    return Decimal(repr(amount)) if isinstance(amount, float) else Decimal(amount)


def _b64decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


class GovernanceTokenVerifier:
    """The seller's verifier (§1.7 steps 1–15).

    - ``audience``: this seller's exact URL (as in its ``adagents.json``); ``aud`` must
      equal it byte for byte.
    - ``jwks``: where issuers' keys come from; ``replay_store``: consumed ``jti``s.
    - ``clock``: epoch seconds (default :func:`time.time`); ``clock_skew_seconds``: 60.
    - ``revocations``: ``issuer → RevocationList | None`` (None: the issuer publishes
      none); omit it only if no issuer you accept publishes one.
    """

    def __init__(
        self,
        *,
        audience: str,
        jwks: JwksResolver,
        replay_store: JtiReplayStore,
        clock: Callable[[], float] = time.time,
        clock_skew_seconds: int = 60,
        algorithms: Collection[str] = ALLOWED_ALGORITHMS,
        revocations: Callable[[str], RevocationList | None] | None = None,
    ) -> None:
        unknown = set(algorithms) - set(ALLOWED_ALGORITHMS)
        if unknown or not algorithms:
            raise ValueError(f"algorithms must be a non-empty subset of {ALLOWED_ALGORITHMS}")
        if not audience:
            raise ValueError("audience must be the seller's URL")
        self.audience = audience
        self._jwks = jwks
        self._replay = replay_store
        self._clock = clock
        self._skew = clock_skew_seconds
        self._algorithms = tuple(algorithms)
        self._revocations = revocations

    def verify(
        self,
        token: str,
        *,
        caller: str,
        task: str,
        payload: Mapping[str, Any],
        commitment: Mapping[str, Any] | None,
        buyer_issuers: Collection[str],
        phase: str = "intent",
        media_buy_id: str | None = None,
        expected_sub: str | None = None,
        idempotency_key: str | None = None,
    ) -> VerifiedGovernanceToken:
        """Run the 15 steps on ``token`` for one inbound request; consume its ``jti``.

        - ``caller``: the agent URL the transport authenticated; ``task``: the task
          invoked (``create_media_buy``…); ``payload``: the request's arguments exactly as
          received (envelope ``context`` and ``governance_context`` are ignored by the hash).
        - ``commitment``: ``{"amount", "currency"}`` the seller computed for this action,
          or None for an action that commits no money (an explicit zero is a commitment).
        - ``buyer_issuers``: the governance agent URLs in the authenticated buyer's
          ``brand.json``.
        - ``phase``: the phase this gate expects (``intent`` for a buyer's token;
          ``purchase``/``modification``/``delivery`` for one from the seller's own
          execution check); ``media_buy_id``: the buy a modification/delivery concerns;
          ``expected_sub``: the ``sub`` accepted earlier in this action's lifecycle.
        - ``idempotency_key``: pass the request's key to let a retry of the same in-flight
          request present the same token again (step 15); None refuses any repeat.

        Returns the verified header and claims. Raises :class:`GovernanceTokenRejected`
        at the first failing step; the ``jti`` is consumed only when every step passed.
        Raises ``ValueError`` if ``commitment`` itself is malformed and ``TypeError`` if
        ``buyer_issuers`` is a single string (both the seller's bugs).
        """
        if isinstance(buyer_issuers, str):  # `in` would match substrings
            raise TypeError("buyer_issuers must be a collection of URLs, not one string")
        if commitment is not None and (problem := _commitment_problem(commitment)):
            raise ValueError(f"the seller's commitment {problem}")
        now = self._clock()
        tok = self._step01_parse(token)
        self._step02_algorithm(tok)
        self._step03_type(tok)
        self._step04_critical(tok)
        self._step05_key_resolution(tok)
        self._step06_key_purpose(tok)
        self._step07_signature(tok)
        self._step08_audience(tok, caller)
        self._step09_time(tok, now)
        self._step10_subject(tok, expected_sub)
        self._step11_phase(tok, phase)
        self._step12_action_binding(tok, task, payload, commitment, media_buy_id)
        self._step13_issuer_authorized(tok, buyer_issuers)
        self._step14_revocation(tok, now)
        self._step15_replay(tok, now, idempotency_key)
        return VerifiedGovernanceToken(header=tok.header, claims=tok.claims)

    # -- the steps, in order -------------------------------------------------------

    @staticmethod
    def _step01_parse(token: str) -> _Token:
        def bad(detail: str) -> GovernanceTokenRejected:
            return GovernanceTokenRejected(
                VerificationStep.PARSE, GovernanceErrorCode.TOKEN_INVALID, detail
            )

        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_CHARS:
            raise bad(f"not a string of 1..{MAX_TOKEN_CHARS} characters")
        if not _COMPACT.match(token):
            raise bad("not a compact JWS (three base64url segments)")
        head_b64, claims_b64, _sig = token.split(".")
        try:
            header = parse_strict_json(_b64decode(head_b64))
            claims = parse_strict_json(_b64decode(claims_b64))
        except (WardenError, binascii.Error, ValueError) as exc:
            raise bad(f"header or payload is not strict JSON: {exc}") from exc
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise bad("header and payload must be JSON objects")

        for name in ("iss", "aud", "jti", "caller", "check_id", "plan_hash"):
            if not _nonempty_str(claims.get(name)):
                raise bad(f"claim {name} is missing or not a non-empty string")
        if not isinstance(claims.get("sub"), str):
            raise bad("claim sub is missing or not a string")
        for name in ("iat", "exp"):
            if not _number(claims.get(name)):
                raise bad(f"claim {name} is missing or not a number")
        if "nbf" in claims and not _number(claims["nbf"]):
            raise bad("claim nbf is not a number")
        phase = claims.get("phase")
        if phase not in PHASES:
            raise bad(f"claim phase is not one of {sorted(PHASES)}")
        if phase == "intent" and "media_buy_id" in claims:
            raise bad("an intent token carries media_buy_id")
        if phase in ("modification", "delivery") and not _nonempty_str(claims.get("media_buy_id")):
            raise bad(f"a {phase} token lacks media_buy_id")
        if "authorized_commitment" in claims and (
            problem := _commitment_problem(claims["authorized_commitment"])
        ):
            raise bad(f"claim authorized_commitment {problem}")
        if "authorized_task" in claims and not _nonempty_str(claims["authorized_task"]):
            raise bad("claim authorized_task is not a non-empty string")
        if "authorized_payload_hash" in claims and not (
            isinstance(claims["authorized_payload_hash"], str)
            and _B64_SHA256.match(claims["authorized_payload_hash"])
        ):
            raise bad("claim authorized_payload_hash is not a base64url SHA-256")
        decisions = claims.get("policy_decisions")
        if decisions is not None and not (
            isinstance(decisions, list)
            and all(
                isinstance(d, dict)
                and _nonempty_str(d.get("policy_id"))
                and _nonempty_str(d.get("outcome"))
                for d in decisions
            )
        ):
            raise bad("claim policy_decisions is not a list of {policy_id, outcome}")
        return _Token(raw=token, header=header, claims=claims)

    def _step02_algorithm(self, tok: _Token) -> None:
        alg = tok.header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise GovernanceTokenRejected(
                VerificationStep.ALGORITHM,
                GovernanceErrorCode.TOKEN_INVALID,
                f"alg {alg!r} is not in the allow-list {list(self._algorithms)}",
            )

    @staticmethod
    def _step03_type(tok: _Token) -> None:
        typ = tok.header.get("typ")
        if typ != TYP or not isinstance(typ, str):
            raise GovernanceTokenRejected(
                VerificationStep.TYPE, GovernanceErrorCode.TOKEN_INVALID, f"typ is {typ!r}"
            )

    @staticmethod
    def _step04_critical(tok: _Token) -> None:
        def bad(detail: str) -> GovernanceTokenRejected:
            return GovernanceTokenRejected(
                VerificationStep.CRITICAL, GovernanceErrorCode.TOKEN_INVALID, detail
            )

        header, claims = tok.header, tok.claims
        if "b64" in header:  # RFC 7797 would change what the signature covers
            raise bad("the b64 header is not part of the profile")
        crit = header.get("crit", [])
        if not isinstance(crit, list) or not all(isinstance(c, str) for c in crit):
            raise bad("crit is not a list of strings")
        if ("crit" in header and not crit) or len(set(crit)) != len(crit):
            raise bad("crit is empty or repeats a name")
        unknown = [c for c in crit if c not in CRITICAL_CLAIMS]
        if unknown:
            raise bad(f"unknown critical header(s) {unknown}")
        for name in CRITICAL_CLAIMS:
            in_crit, has_marker, has_claim = name in crit, name in header, name in claims
            if has_marker and header[name] is not True:
                raise bad(f"marker {name} is not true")
            if not in_crit == has_marker == has_claim:
                raise bad(
                    f"{name}: claim {'present' if has_claim else 'absent'}, marker "
                    f"{'present' if has_marker else 'absent'}, crit entry "
                    f"{'present' if in_crit else 'absent'}"
                )
        if ("authorized_task" in claims) != ("authorized_payload_hash" in claims):
            raise bad("authorized_task and authorized_payload_hash must come together")

    def _step05_key_resolution(self, tok: _Token) -> None:
        step = VerificationStep.KEY_RESOLUTION
        kid = tok.header.get("kid")
        if not _nonempty_str(kid):
            raise GovernanceTokenRejected(step, GovernanceErrorCode.TOKEN_INVALID, "kid missing")
        issuer = tok.claims["iss"]
        matches: list[dict[str, Any]] = []
        for refresh in (False, True):
            try:
                jwks = self._jwks.resolve(issuer, refresh=refresh)
            except JwksUnavailable as exc:
                raise GovernanceTokenRejected(
                    step, GovernanceErrorCode.JWKS_UNAVAILABLE, exc.message
                ) from exc
            except JwksUntrusted as exc:
                raise GovernanceTokenRejected(
                    step, GovernanceErrorCode.JWKS_UNTRUSTED, exc.message
                ) from exc
            keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
            try:
                size = len(json.dumps(dict(jwks), separators=(",", ":")).encode())
            except (TypeError, ValueError):
                size = MAX_JWKS_BYTES + 1
            if not isinstance(keys, list) or size > MAX_JWKS_BYTES:
                raise GovernanceTokenRejected(
                    step,
                    GovernanceErrorCode.JWKS_UNTRUSTED,
                    f"JWKS of {issuer} is not a key set of at most {MAX_JWKS_BYTES} bytes",
                )
            matches = [k for k in keys if isinstance(k, dict) and k.get("kid") == kid]
            if matches:
                break
        if not matches:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.KEY_UNKNOWN, f"kid {kid!r} is not in {issuer}'s JWKS"
            )
        if len(matches) > 1:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.JWKS_UNTRUSTED, f"kid {kid!r} is listed twice"
            )
        tok.jwk = matches[0]

    @staticmethod
    def _step06_key_purpose(tok: _Token) -> None:
        jwk, alg = tok.jwk, tok.header["alg"]

        def unknown(detail: str) -> GovernanceTokenRejected:
            return GovernanceTokenRejected(
                VerificationStep.KEY_PURPOSE, GovernanceErrorCode.KEY_UNKNOWN, detail
            )

        if jwk.get("use") != "sig":
            raise unknown("the JWK is not use: sig")
        key_ops = jwk.get("key_ops")
        if not isinstance(key_ops, list) or "verify" not in key_ops:
            raise unknown("the JWK's key_ops lacks verify")
        if "adcp_use" in jwk and jwk["adcp_use"] != "governance-signing":
            raise unknown(f"the JWK is for {jwk['adcp_use']!r}, not governance-signing")
        if "alg" in jwk and jwk["alg"] != alg:
            raise unknown(f"the JWK is for alg {jwk['alg']!r}, the token uses {alg!r}")
        if (jwk.get("kty"), jwk.get("crv")) != _KEY_SHAPE[alg]:
            raise unknown(f"the JWK is not a {_KEY_SHAPE[alg]} key for {alg}")
        if "d" in jwk:
            raise GovernanceTokenRejected(
                VerificationStep.KEY_PURPOSE,
                GovernanceErrorCode.JWKS_UNTRUSTED,
                "the published JWK holds a private key",
            )

    @staticmethod
    def _step07_signature(tok: _Token) -> None:
        alg = tok.header["alg"]
        try:
            key = JWKRegistry.import_key(tok.jwk)
            registry = ProfileRegistry([alg], strict_check_header=False)
            jws.deserialize_compact(tok.raw, key, registry=registry)
        except (JoseError, ValueError, TypeError) as exc:
            raise GovernanceTokenRejected(
                VerificationStep.SIGNATURE,
                GovernanceErrorCode.TOKEN_INVALID,
                f"signature does not verify: {type(exc).__name__}",
            ) from exc

    def _step08_audience(self, tok: _Token, caller: str) -> None:
        def not_applicable(detail: str) -> GovernanceTokenRejected:
            return GovernanceTokenRejected(
                VerificationStep.AUDIENCE, GovernanceErrorCode.TOKEN_NOT_APPLICABLE, detail
            )

        if tok.claims["aud"] != self.audience:
            raise not_applicable(f"aud {tok.claims['aud']!r} is not {self.audience!r}")
        if tok.claims["caller"] != caller:
            raise not_applicable(f"caller {tok.claims['caller']!r} is not {caller!r}")

    def _step09_time(self, tok: _Token, now: float) -> None:
        c, step = tok.claims, VerificationStep.TIME
        # Expiry first: a token past its exp is expired whatever else is wrong with its
        # times (the vectors' token-expired case has exp < iat).
        if now > c["exp"] + self._skew:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.TOKEN_EXPIRED, f"exp {c['exp']} < now {now}"
            )
        if c["iat"] > now + self._skew:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.TOKEN_NOT_YET_VALID, f"iat {c['iat']} > now {now}"
            )
        if "nbf" in c and c["nbf"] - self._skew > now:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.TOKEN_NOT_YET_VALID, f"nbf {c['nbf']} > now {now}"
            )
        if c["exp"] <= c["iat"]:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.TOKEN_INVALID, "exp is not after iat"
            )
        if c["phase"] in _EXECUTION_PHASES and c["exp"] - c["iat"] > MAX_EXECUTION_TTL_SECONDS:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.TOKEN_INVALID, "an execution token outlives 30 days"
            )

    @staticmethod
    def _step10_subject(tok: _Token, expected_sub: str | None) -> None:
        sub = tok.claims["sub"]
        if not sub:
            raise GovernanceTokenRejected(
                VerificationStep.SUBJECT, GovernanceErrorCode.TOKEN_INVALID, "sub is empty"
            )
        if expected_sub is not None and sub != expected_sub:
            raise GovernanceTokenRejected(
                VerificationStep.SUBJECT,
                GovernanceErrorCode.TOKEN_NOT_APPLICABLE,
                f"sub {sub!r} is not the accepted {expected_sub!r}",
            )

    @staticmethod
    def _step11_phase(tok: _Token, phase: str) -> None:
        if tok.claims["phase"] != phase:
            raise GovernanceTokenRejected(
                VerificationStep.PHASE,
                GovernanceErrorCode.TOKEN_NOT_APPLICABLE,
                f"phase {tok.claims['phase']!r}, this gate takes {phase!r}",
            )

    @staticmethod
    def _step12_action_binding(
        tok: _Token,
        task: str,
        payload: Mapping[str, Any],
        commitment: Mapping[str, Any] | None,
        media_buy_id: str | None,
    ) -> None:
        c = tok.claims

        def not_applicable(detail: str) -> GovernanceTokenRejected:
            return GovernanceTokenRejected(
                VerificationStep.ACTION_BINDING, GovernanceErrorCode.TOKEN_NOT_APPLICABLE, detail
            )

        if "authorized_task" not in c:
            raise not_applicable("the token authorizes no task")
        if c["authorized_task"] != task:
            raise not_applicable(f"authorized_task {c['authorized_task']!r} is not {task!r}")
        try:
            recomputed = authorized_payload_hash(payload)
        except WardenError as exc:
            raise not_applicable(f"the request payload cannot be hashed: {exc.message}") from exc
        if c["authorized_payload_hash"] != recomputed:
            raise not_applicable("authorized_payload_hash does not match the request")
        if "media_buy_id" in c and c["media_buy_id"] != media_buy_id:
            raise not_applicable(f"media_buy_id {c['media_buy_id']!r} is not {media_buy_id!r}")
        if commitment is None:
            return
        ceiling = c.get("authorized_commitment")
        if ceiling is None:
            raise not_applicable("a monetary action needs an authorized_commitment")
        if ceiling["currency"] != commitment["currency"]:
            raise not_applicable(
                f"currency {commitment['currency']} is not the authorized {ceiling['currency']}"
            )
        if _decimal(commitment["amount"]) > _decimal(ceiling["amount"]):
            raise not_applicable(
                f"amount {commitment['amount']} exceeds the ceiling {ceiling['amount']}"
            )

    @staticmethod
    def _step13_issuer_authorized(tok: _Token, buyer_issuers: Collection[str]) -> None:
        if tok.claims["iss"] not in buyer_issuers:
            raise GovernanceTokenRejected(
                VerificationStep.ISSUER_AUTHORIZED,
                GovernanceErrorCode.ISSUER_NOT_AUTHORIZED,
                f"iss {tok.claims['iss']!r} is not a governance agent of this buyer",
            )

    def _step14_revocation(self, tok: _Token, now: float) -> None:
        if self._revocations is None:
            return
        revoked = self._revocations(tok.claims["iss"])
        if revoked is None:
            return
        step = VerificationStep.REVOCATION
        if tok.claims["jti"] in revoked.revoked_jtis or tok.header["kid"] in revoked.revoked_kids:
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.TOKEN_REVOKED, "jti or kid is revoked"
            )
        if (
            tok.claims["phase"] in _EXECUTION_PHASES
            and revoked.next_update is not None
            and now > revoked.next_update + revoked.grace_seconds
        ):
            raise GovernanceTokenRejected(
                step, GovernanceErrorCode.REVOCATION_STALE, "the revocation list is stale"
            )

    def _step15_replay(self, tok: _Token, now: float, idempotency_key: str | None) -> None:
        c = tok.claims
        fresh = self._replay.consume(
            issuer=c["iss"],
            audience=c["aud"],
            jti=c["jti"],
            expires_at=c["exp"] + self._skew,
            now=now,
            idempotency_key=idempotency_key,
        )
        if not fresh:
            raise GovernanceTokenRejected(
                VerificationStep.REPLAY,
                GovernanceErrorCode.TOKEN_REPLAYED,
                f"jti {c['jti']!r} was already used with {c['aud']}",
            )
