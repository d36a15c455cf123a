"""The AdCP RFC 9421 verifier checklist (security.mdx "Verifier checklist (requests)"
and "Verifier checklist for webhooks"), one ordered function with one stable error
code per failure.

Order (first failure wins; ``failed_step`` of the vectors in brackets):

- pre-check [0/1]: no ``Signature-Input`` and no ``Signature`` → unsigned (refused with
  ``*_required`` only when the caller says the operation requires a signature); one
  without the other → ``header_malformed``;
- [1] both parse as RFC 8941 dictionaries without repeated keys; label ``sig1`` is in
  both (other labels are ignored); its covered components are strings without
  parameters; its sig-params have their RFC 9421 types (``keyid="…"``, never a token);
  its signature is a byte sequence in the profile's Base64; every covered field occurs
  once, ``content-type`` holds one value and ``content-digest`` no repeated algorithm;
  the URL canonicalizes (an IDN U-label host is refused) → ``header_malformed``;
- [2] ``created``, ``expires``, ``nonce``, ``keyid``, ``alg``, ``tag`` all present →
  ``params_incomplete``;
- [3] ``tag`` is the profile's → ``tag_invalid``;
- [4] ``alg`` is ``ed25519`` or ``ecdsa-p256-sha256`` → ``alg_not_allowed``;
- [5] ``created < expires``, ``expires - created ≤ 300``, ``created ≤ now + 60``,
  ``now ≤ expires + 60`` → ``window_invalid``;
- [6] ``@method``, ``@target-uri``, ``@authority`` (and ``content-type`` when there is a
  body) covered, ``content-digest`` as the profile's digest policy says →
  ``components_incomplete`` / ``components_unexpected``;
- [7] ``keyid`` resolves → ``key_unknown``; [8] the JWK is usable for the profile's
  purposes and this ``alg`` (:func:`~warden.adcp.rfc9421.keys.usable_key`) →
  ``key_purpose_invalid``;
- [9] the key is not revoked and the revocation snapshot is fresh → ``key_revoked`` /
  ``revocation_stale``; [9a] the key's replay-cache entries are under the cap →
  ``rate_abuse`` (both before any cryptography: no amplified verification work);
- [10] the signature verifies over the signature base → ``invalid``;
- [11] a covered ``content-digest`` matches the body → ``digest_mismatch``;
- [12–13] ``(keyid, nonce)`` is recorded atomically, or was already → ``replayed``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import http_sf

from warden.adcp.rfc9421.fields import FieldMalformed, parse_dictionary, serialize_member
from warden.adcp.rfc9421.keys import ALGORITHMS, KeyUnusable, usable_key, verify_signature
from warden.adcp.rfc9421.target import Target, TargetUriMalformed, canonicalize
from warden.errors import WardenError

MAX_WINDOW_S = 300
SKEW_S = 60
LABEL = "sig1"
REQUIRED_PARAMS = ("created", "expires", "nonce", "keyid", "alg", "tag")
_INT_PARAMS = frozenset({"created", "expires"})
_STR_PARAMS = frozenset({"nonce", "keyid", "alg", "tag"})
_DERIVED = frozenset({"@method", "@target-uri", "@authority", "@scheme", "@path", "@query"})
_DIGESTS = {"sha-256": hashlib.sha256, "sha-512": hashlib.sha512}

DigestPolicy = Literal["required", "either", "forbidden", "required_with_body"]


@dataclass(frozen=True)
class Profile:
    """One verification profile.

    ``prefix``: the error-code family (``request_signature`` / ``webhook_signature``);
    ``tag``: the required ``tag`` sig-param; ``purposes``: the ``adcp_use`` values a
    key may have; ``legacy_binary``: Base64URL tolerated (3.1 requests, webhooks);
    ``digest``: the ``content-digest`` policy (``required_with_body``: required when
    the body is not empty, AdCP 3.2).
    """

    name: str
    prefix: str
    tag: str
    purposes: frozenset[str]
    legacy_binary: bool
    digest: DigestPolicy

    def with_digest(self, digest: DigestPolicy) -> Profile:
        return Profile(self.name, self.prefix, self.tag, self.purposes, self.legacy_binary, digest)


REQUEST_TAG = "adcp/request-signing/v1"
WEBHOOK_TAG = "adcp/webhook-signing/v1"
REQUEST_PROFILE_32 = Profile(
    "3.2", "request_signature", REQUEST_TAG, frozenset({"request-signing"}), False,
    "required_with_body",
)  # fmt: skip
REQUEST_PROFILE_31 = Profile(
    "3.1", "request_signature", REQUEST_TAG, frozenset({"request-signing"}), True, "either"
)
WEBHOOK_PROFILE = Profile(
    "webhook-v1", "webhook_signature", WEBHOOK_TAG,
    frozenset({"request-signing", "webhook-signing"}), True, "required",
)  # fmt: skip


class SignatureRejected(WardenError):
    """The request's signature is refused: ``code`` is the stable AdCP error code
    (``request_signature_window_invalid`` …), ``step`` the checklist step."""

    reason = "signature_rejected"

    def __init__(self, code: str, message: str, step: int | str) -> None:
        super().__init__(message, code=code, step=step)
        self.code = code
        self.step = step


@dataclass(frozen=True)
class HttpRequest:
    """A received (or to-be-sent) HTTP request: ``url`` absolute as the signer saw it,
    ``headers`` every field line in order (names any case, repeats allowed), ``body``
    the exact bytes."""

    method: str
    url: str
    headers: Sequence[tuple[str, str]]
    body: bytes = b""

    @classmethod
    def of(
        cls, method: str, url: str, headers: Mapping[str, str] | Iterable[tuple[str, str]],
        body: bytes | str = b"",
    ) -> HttpRequest:  # fmt: skip
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        raw = body.encode("utf-8") if isinstance(body, str) else body
        return cls(method, url, tuple(pairs), raw)

    def field_lines(self, name: str) -> list[str]:
        lowered = name.lower()
        return [v for k, v in self.headers if k.lower() == lowered]


RevocationStatus = Literal["ok", "revoked", "stale"]


class VerifierState(Protocol):
    """What the checklist reads and writes besides the request.

    ``resolve(keyid)``: the signer's JWK or None; ``revocation(keyid, now)``;
    ``cap_reached(keyid, now)``: the key's live replay entries are at the cap;
    ``remember(keyid, nonce, until)``: record the pair atomically, False if it was
    already recorded (a replay). Store failures propagate (the caller fails closed).
    """

    def resolve(self, keyid: str) -> Mapping[str, Any] | None: ...

    def revocation(self, keyid: str, now: int) -> RevocationStatus: ...

    def cap_reached(self, keyid: str, now: int) -> bool: ...

    def remember(self, keyid: str, nonce: str, until: int) -> bool: ...


@dataclass(frozen=True)
class Verified:
    """An accepted signature: who signed (``keyid``, its ``jwk``), what it covered and
    the ``base`` it was computed over."""

    keyid: str
    jwk: Mapping[str, Any]
    alg: str
    nonce: str
    created: int
    expires: int
    covered: tuple[str, ...]
    base: str
    covers_digest: bool = field(default=False)


def signature_base(
    req: HttpRequest, target: Target, covered: Sequence[str], params_text: str
) -> str:
    """The RFC 9421 §2.5 signature base: one ``"<component>": <value>`` line per
    covered component in order, then ``"@signature-params": <params_text>``; lines
    joined by LF, no trailing newline. Header values are trimmed of surrounding
    whitespace; a covered field absent or repeated raises :class:`FieldMalformed`."""
    lines = [f'"{c}": {component_value(req, target, c)}' for c in covered]
    lines.append(f'"@signature-params": {params_text}')
    return "\n".join(lines)


def component_value(req: HttpRequest, target: Target, name: str) -> str:
    if name == "@method":
        return req.method.upper()
    if name == "@target-uri":
        return target.target_uri
    if name == "@authority":
        return target.authority
    rest = target.target_uri.split("://", 1)[1]
    path_query = rest[len(target.authority) :]
    path, q, query = path_query.partition("?")
    if name == "@scheme":
        return target.target_uri.split("://", 1)[0]
    if name == "@path":
        return path
    if name == "@query":
        return "?" + query if q else "?"
    lines = req.field_lines(name)
    if not lines:
        raise FieldMalformed(f"covered field {name!r} is not in the request")
    if len(lines) > 1:
        raise FieldMalformed(f"covered field {name!r} occurs {len(lines)} times")
    return lines[0].strip(" \t")


def verify_request(
    req: HttpRequest,
    profile: Profile,
    state: VerifierState,
    now: int,
    *,
    required: bool = False,
) -> Verified | None:
    """Run the checklist on ``req`` at ``now`` (Unix seconds). Returns None for an
    unsigned request that is not ``required`` to be signed, :class:`Verified` for an
    accepted one; raises :class:`SignatureRejected` otherwise."""

    def reject(suffix: str, message: str, step: int | str) -> SignatureRejected:
        return SignatureRejected(f"{profile.prefix}_{suffix}", message, step)

    inputs, sigs = req.field_lines("signature-input"), req.field_lines("signature")
    if not inputs and not sigs:
        if required:
            raise reject("required", "this operation requires an RFC 9421 signature", 0)
        return None
    if not inputs or not sigs:
        raise reject("header_malformed", "Signature and Signature-Input come as a pair", 1)

    # -- step 1: parse ------------------------------------------------------------------
    try:
        si = parse_dictionary(", ".join(inputs), legacy=profile.legacy_binary, binary=False)
        sg = parse_dictionary(", ".join(sigs), legacy=profile.legacy_binary, binary=True)
        member, signature = _label(si, sg)
        covered, params = _member(member)
        target = canonicalize(req.url)
        _single_valued(req, covered, profile.legacy_binary)
    except (FieldMalformed, TargetUriMalformed) as exc:
        raise reject("header_malformed", str(exc), 1) from None

    # -- steps 2-6: parameters, tag, alg, window, components ----------------------------
    missing = [p for p in REQUIRED_PARAMS if p not in params]
    if missing:
        raise reject("params_incomplete", f"sig-params missing: {', '.join(missing)}", 2)
    if params["tag"] != profile.tag:
        raise reject("tag_invalid", f"tag must be {profile.tag!r}", 3)
    alg = str(params["alg"])
    if alg not in ALGORITHMS:
        raise reject("alg_not_allowed", f"alg {alg!r} is not allowed", 4)
    created, expires = int(params["created"]), int(params["expires"])
    if expires <= created or expires - created > MAX_WINDOW_S:
        raise reject("window_invalid", "expires must be within 300 s after created", 5)
    if created > now + SKEW_S or now > expires + SKEW_S:
        raise reject("window_invalid", "the signature is outside its validity window", 5)
    _components(req, covered, profile, reject)

    # -- steps 7-9a: key, purpose, revocation, cap (no cryptography yet) ----------------
    keyid = str(params["keyid"])
    jwk = state.resolve(keyid)
    if jwk is None:
        raise reject("key_unknown", "keyid names no registered key", 7)
    try:
        key = usable_key(jwk, alg, profile.purposes)
    except KeyUnusable as exc:
        raise reject("key_purpose_invalid", str(exc), 8) from None
    status = state.revocation(keyid, now)
    if status == "revoked":
        raise reject("key_revoked", "the key is revoked", 9)
    if status == "stale":
        raise reject("revocation_stale", "the revocation list is stale", 9)
    if state.cap_reached(keyid, now):
        raise reject("rate_abuse", "the key's replay-cache entries are at the cap", "9a")

    # -- step 10: cryptography ------------------------------------------------------------
    base = signature_base(req, target, covered, serialize_member(member))
    if not verify_signature(key, alg, signature, base.encode("utf-8")):
        raise reject("invalid", "the signature does not verify", 10)

    # -- step 11: body digest -------------------------------------------------------------
    digest_covered = "content-digest" in covered
    if digest_covered and not _digest_matches(req, profile.legacy_binary):
        raise reject("digest_mismatch", "Content-Digest does not match the body", 11)

    # -- steps 12-13: replay --------------------------------------------------------------
    nonce = str(params["nonce"])
    if not state.remember(keyid, nonce, expires + SKEW_S):
        raise reject("replayed", "this (keyid, nonce) was already used", 12)
    return Verified(keyid, jwk, alg, nonce, created, expires, tuple(covered), base, digest_covered)


def _label(si: dict[str, Any], sg: dict[str, Any]) -> tuple[Any, bytes]:
    if LABEL not in si or LABEL not in sg:
        raise FieldMalformed(f"no {LABEL!r} label in both Signature-Input and Signature")
    value, _params = sg[LABEL]
    if not isinstance(value, bytes):
        raise FieldMalformed("the signature is not a byte sequence")
    return si[LABEL], value


def _member(member: Any) -> tuple[list[str], dict[str, Any]]:
    items, params = member
    if not isinstance(items, list):
        raise FieldMalformed("the signature input is not an inner list of components")
    covered: list[str] = []
    for value, item_params in items:
        if not isinstance(value, str) or isinstance(value, http_sf.Token) or item_params:
            raise FieldMalformed("covered components are plain strings without parameters")
        if value != value.lower() or (value.startswith("@") and value not in _DERIVED):
            raise FieldMalformed(f"component {value!r} is not supported")
        if value in covered:
            raise FieldMalformed(f"component {value!r} is covered twice")
        covered.append(value)
    for name, value in params.items():
        if name in _INT_PARAMS and (not isinstance(value, int) or isinstance(value, bool)):
            raise FieldMalformed(f"sig-param {name} must be an integer")
        if name in _STR_PARAMS and (not isinstance(value, str) or isinstance(value, http_sf.Token)):
            raise FieldMalformed(f"sig-param {name} must be a quoted string")
    return covered, dict(params)


def _single_valued(req: HttpRequest, covered: Sequence[str], legacy: bool) -> None:
    for name in covered:
        if name.startswith("@"):
            continue
        lines = req.field_lines(name)
        if len(lines) > 1:
            raise FieldMalformed(f"covered field {name!r} occurs {len(lines)} times")
        if not lines:
            continue  # judged at step 6 (content-digest) or when the base is built
        if name == "content-type" and "," in lines[0]:
            raise FieldMalformed("content-type holds more than one value")
        if name == "content-digest":
            parse_dictionary(lines[0], legacy=legacy, binary=True)


def _components(req: HttpRequest, covered: Sequence[str], profile: Profile, reject: Any) -> None:
    need = ["@method", "@target-uri", "@authority"]
    if req.body:
        need.append("content-type")
    missing = [c for c in need if c not in covered]
    if missing:
        raise reject("components_incomplete", f"not covered: {', '.join(missing)}", 6)
    digest = "content-digest" in covered
    policy = profile.digest
    if policy == "required_with_body":
        policy = "required" if req.body else "either"
    if policy == "required" and not digest:
        raise reject("components_incomplete", "content-digest must be covered", 6)
    if policy == "forbidden" and digest:
        raise reject("components_unexpected", "content-digest must not be covered", 6)
    for name in covered:
        if not name.startswith("@") and not req.field_lines(name):
            raise reject("header_malformed", f"covered field {name!r} is missing", 1)


def _digest_matches(req: HttpRequest, legacy: bool) -> bool:
    """True when every supported algorithm in ``Content-Digest`` (RFC 9530) matches the
    body, and there is at least one."""
    parsed = parse_dictionary(req.field_lines("content-digest")[0], legacy=legacy, binary=True)
    seen = False
    for alg, (value, _params) in parsed.items():
        fn = _DIGESTS.get(alg)
        if fn is None:
            continue
        if not isinstance(value, bytes) or not hmac.compare_digest(value, fn(req.body).digest()):
            return False
        seen = True
    return seen


def content_digest(body: bytes) -> str:
    """The ``Content-Digest`` value for ``body``: ``sha-256=:<standard Base64>:``."""
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode("ascii") + ":"
