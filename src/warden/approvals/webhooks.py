"""Outbound webhooks: the legacy AdCP HMAC-SHA256 signature, its verifier, the
webhooks file and the destination guard.

Implements specs/adcp-spend-kla.md §1.4 (AdCP 3.2.0-beta.0 ``push_notification_config``
with ``authentication.schemes = ["HMAC-SHA256"]``), checked against every vector of
``static/test-vectors/webhook-hmac-sha256.json``:

- headers ``X-ADCP-Signature: sha256=<lowercase hex>`` and ``X-ADCP-Timestamp: <unix s>``;
- signed message ``ascii(timestamp) + b"." + raw body bytes`` (the bytes on the wire, never
  re-serialized; bodies built here use compact ``,``/``:`` separators);
- key: the UTF-8 bytes of the secret string as given (a hex-looking secret is *not*
  hex-decoded);
- the verifier order of §1.4 (headers, numeric timestamp, ±300 s window, constant-time
  compare after a length check), then a duplicate-key check that fails as
  *malformed body*, never as a signature mismatch;
- secrets of at least 32 bytes, refused at configuration time when degenerate.

:func:`check_destination` keeps a webhook from being pointed at the gateway's own
network (loopback, private, link-local, cloud metadata) unless the operator allows it
by category in the webhooks file. It runs when the file is loaded and again before
every send, because DNS answers change.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import socket
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from warden import strict_yaml
from warden.errors import ConfigError, WardenError

SIGNATURE_HEADER = "X-ADCP-Signature"
TIMESTAMP_HEADER = "X-ADCP-Timestamp"
SIGNATURE_PREFIX = "sha256="
WINDOW_S = 300
"""Largest accepted ``|now - timestamp|``, seconds (§1.4 verifier step 3)."""
MIN_SECRET_BYTES = 32

Event = Literal[
    "requested", "approved", "denied", "rerouted", "expired", "consumed", "canceled", "voted"
]
EVENTS: tuple[str, ...] = get_args(Event)
"""Approval-task events a webhook can subscribe to."""

AllowCategory = Literal["loopback", "private", "link_local"]
ALLOW_CATEGORIES: tuple[str, ...] = get_args(AllowCategory)


# -- errors -----------------------------------------------------------------------------


class DuplicateKeyInput(WardenError):
    """The signer was handed JSON text with a repeated object key (at any depth).

    Raised before any HMAC is computed; no signed frame exists. ``keys`` holds at most
    four offending key names, sanitized for logging. The caller must fix its input;
    retrying cannot help (vector file, ``signer_side``: ``reject-input-before-sign``).
    """

    reason = "duplicate_key_input"

    def __init__(self, keys: Sequence[str]) -> None:
        shown = [_sanitize_key(k) for k in list(keys)[:4]]
        super().__init__(f"webhook body has duplicate object keys: {shown}", keys=shown)
        self.keys = tuple(shown)


class InvalidBodyInput(WardenError):
    """The signer was handed text that is not JSON; nothing was signed."""

    reason = "invalid_body_input"


class WeakSecret(ConfigError):
    """A webhook secret shorter than 32 bytes or without entropy (§1.4 secret rules)."""

    reason = "weak_webhook_secret"


class DestinationRefused(ConfigError):
    """A webhook URL is not http(s), cannot be resolved, or resolves to an address in a
    refused category (see :func:`check_destination`)."""

    reason = "webhook_destination_refused"


def _sanitize_key(key: str) -> str:
    """Step-14b style: cut at the first non-printable character (noting the original
    UTF-8 length as ``<sanitized:N>``), keep at most 32 UTF-8 bytes on a code point."""
    for i, ch in enumerate(key):
        if not ch.isprintable():
            return _cut_utf8(key[:i], 32) + f"<sanitized:{len(key.encode('utf-8'))}>"
    return _cut_utf8(key, 32)


def _cut_utf8(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", errors="ignore")


# -- duplicate-key detection ------------------------------------------------------------


class _DuplicateKeys(Exception):
    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    dups: list[str] = []
    for key, value in pairs:
        if key in obj:
            dups.append(key)
        obj[key] = value
    if dups:
        raise _DuplicateKeys(dups)
    return obj


def _parse_detecting_duplicates(raw: bytes | str) -> Any:
    """Parse JSON, raising :class:`_DuplicateKeys` on a repeated key at any depth.

    Lenient about control characters inside strings (``strict=False``): whether the
    body is good JSON is the consumer's question, a duplicate key is the verifier's.
    Raises ``ValueError`` (or ``RecursionError``) when the text is not JSON at all.
    """
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    return json.JSONDecoder(object_pairs_hook=_pairs_hook, strict=False).decode(text)


# -- signing ----------------------------------------------------------------------------


def sign(secret: str, timestamp: int, raw_body: bytes) -> str:
    """The ``X-ADCP-Signature`` value for ``raw_body`` sent at ``timestamp``.

    ``secret`` is used as its UTF-8 bytes; ``timestamp`` is Unix seconds; ``raw_body``
    is exactly the bytes on the wire. Returns ``"sha256=" + lowercase hex`` (71 chars).
    Pure: it does not check the secret (:func:`check_secret` does, at config time).
    """
    message = str(int(timestamp)).encode("ascii") + b"." + raw_body
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def encode_body(payload: Mapping[str, Any] | str | bytes) -> bytes:
    """The bytes to send for ``payload``.

    A mapping is serialized with compact separators (``,`` and ``:``), UTF-8, no NaN.
    Pre-serialized text (``str`` or UTF-8 ``bytes``) is sent as given, never
    re-serialized, after a parse that refuses a repeated key at any depth.

    Raises :class:`DuplicateKeyInput` (``duplicate_key_input``) for duplicate keys,
    :class:`InvalidBodyInput` for text that is not JSON (or not UTF-8-encodable),
    ``ValueError``/``TypeError`` for a mapping holding NaN/Infinity or non-JSON values.
    """
    if isinstance(payload, Mapping):
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate in some string
            raise InvalidBodyInput(f"webhook body is not valid Unicode: {exc}") from None
    try:
        raw = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        _parse_detecting_duplicates(raw)
    except _DuplicateKeys as exc:
        raise DuplicateKeyInput(exc.keys) from None
    except (ValueError, RecursionError) as exc:
        raise InvalidBodyInput(f"webhook body is not JSON: {exc}") from None
    return raw


@dataclass(frozen=True)
class SignedRequest:
    """One signed frame: ``body`` (bytes to send) and ``headers`` (``Content-Type``,
    ``X-ADCP-Timestamp``, ``X-ADCP-Signature``)."""

    body: bytes
    headers: dict[str, str]


def sign_request(
    secret: str, payload: Mapping[str, Any] | str | bytes, timestamp: int
) -> SignedRequest:
    """The signer entry point: :func:`encode_body` then :func:`sign`.

    Raises :class:`DuplicateKeyInput` before any HMAC is computed when ``payload`` is
    JSON text with a repeated key; see :func:`encode_body` for the other errors.
    """
    body = encode_body(payload)
    return SignedRequest(body=body, headers=signature_headers(secret, timestamp, body))


def signature_headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The request headers for an already encoded ``body`` sent at ``timestamp`` (Unix s)."""
    return {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: str(int(timestamp)),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }


# -- verification -----------------------------------------------------------------------


class VerifyOutcome(StrEnum):
    """What :func:`verify` concluded; each failure is its own class."""

    ACCEPTED = "accepted"
    MISSING_HEADER = "missing_header"
    INVALID_TIMESTAMP = "invalid_timestamp"
    TIMESTAMP_OUT_OF_WINDOW = "timestamp_out_of_window"
    SIGNATURE_INVALID = "signature_invalid"
    BODY_MALFORMED = "webhook_body_malformed"

    @property
    def action(self) -> str:
        """The vector file's ``verifier_action_values`` token: ``accept``,
        ``reject-malformed`` (valid signature, duplicate-key body) or ``reject``."""
        if self is VerifyOutcome.ACCEPTED:
            return "accept"
        if self is VerifyOutcome.BODY_MALFORMED:
            return "reject-malformed"
        return "reject"


@dataclass(frozen=True)
class VerifyResult:
    """``outcome`` plus a fixed ``detail`` sentence; ``secret_index`` is which of the
    given secrets matched (0 = current, 1 = previous) once the HMAC has verified."""

    outcome: VerifyOutcome
    detail: str
    secret_index: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is VerifyOutcome.ACCEPTED


_DIGITS = re.compile(r"[0-9]{1,15}")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        for key, v in headers.items():
            if key.lower() == lowered:
                return v
    return value


def verify(
    secret: str | Sequence[str], headers: Mapping[str, str], raw_body: bytes, now: int
) -> VerifyResult:
    """Verify one received webhook (§1.4 verifier order, then the duplicate-key rule).

    ``secret``: the current secret, or ``[current, previous]`` during a rotation (keep
    the previous one for at most 5 minutes). ``headers``: matched case-insensitively.
    ``raw_body``: the exact received bytes. ``now``: Unix seconds.

    Steps, first failure wins: (1) either header missing or empty → ``MISSING_HEADER``;
    (2) timestamp not ASCII digits → ``INVALID_TIMESTAMP``; (3) ``|now - ts| > 300`` →
    ``TIMESTAMP_OUT_OF_WINDOW``; (4) not ``sha256=``-prefixed, wrong length, or no
    secret's HMAC matches in constant time → ``SIGNATURE_INVALID``; (5) the body has a
    repeated JSON object key → ``BODY_MALFORMED`` (the signature *is* valid). A body
    that is not JSON at all is accepted: judging it is the consumer's job. Never raises
    for hostile input; raises ``ValueError`` for an empty secret list.
    """
    secrets = [secret] if isinstance(secret, str) else list(secret)
    if not secrets:
        raise ValueError("verify needs at least one secret")
    signature = _header(headers, SIGNATURE_HEADER)
    ts_text = _header(headers, TIMESTAMP_HEADER)
    if not signature or not ts_text:
        return VerifyResult(VerifyOutcome.MISSING_HEADER, "signature or timestamp header missing")
    if _DIGITS.fullmatch(ts_text) is None:
        return VerifyResult(VerifyOutcome.INVALID_TIMESTAMP, "timestamp is not numeric")
    if abs(now - int(ts_text)) > WINDOW_S:
        return VerifyResult(
            VerifyOutcome.TIMESTAMP_OUT_OF_WINDOW, "timestamp outside the 300 s window"
        )
    if not signature.startswith(SIGNATURE_PREFIX):
        return VerifyResult(VerifyOutcome.SIGNATURE_INVALID, "only sha256= signatures are valid")
    received = signature.encode("utf-8")
    message = ts_text.encode("ascii") + b"." + raw_body
    matched: int | None = None
    for i, candidate in enumerate(secrets):
        digest = hmac.new(candidate.encode("utf-8"), message, hashlib.sha256).hexdigest()
        expected = (SIGNATURE_PREFIX + digest).encode("ascii")
        if len(received) != len(expected):
            continue  # length first: never compare unequal lengths
        if hmac.compare_digest(received, expected) and matched is None:
            matched = i
    if matched is None:
        return VerifyResult(VerifyOutcome.SIGNATURE_INVALID, "signature does not match")
    try:
        _parse_detecting_duplicates(raw_body)
    except _DuplicateKeys:
        return VerifyResult(
            VerifyOutcome.BODY_MALFORMED, "body has duplicate object keys", secret_index=matched
        )
    except (ValueError, RecursionError):
        pass
    return VerifyResult(VerifyOutcome.ACCEPTED, "verified", secret_index=matched)


# -- secrets ----------------------------------------------------------------------------


def check_secret(secret: str) -> None:
    """Refuse a secret that is too weak to sign with (§1.4; ``secret_rejection_vectors``).

    Refused: fewer than 32 UTF-8 bytes; one character repeated (all-zero, all-one,
    ``aaaa…``); a pattern of at most 4 characters repeated (``abab…``, ``12341234…``).
    Raises :class:`WeakSecret`; the message never contains the secret.
    """
    size = len(secret.encode("utf-8"))
    if size < MIN_SECRET_BYTES:
        raise WeakSecret(f"webhook secret must be at least {MIN_SECRET_BYTES} bytes, got {size}")
    for period in range(1, 5):
        unit = secret[:period]
        if len(secret) % period == 0 and unit * (len(secret) // period) == secret:
            raise WeakSecret(
                "webhook secret has no entropy (a short pattern repeated); "
                "generate at least 32 random bytes"
            )


# -- destinations -----------------------------------------------------------------------

_PRIVATE_NETS = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
_LINK_LOCAL_NETS = tuple(ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def classify_address(ip: IPAddress) -> str | None:
    """The category of ``ip``: None when publicly routable, else ``loopback``,
    ``private`` (RFC 1918, CGNAT 100.64/10, ULA fc00::/7), ``link_local`` (169.254/16,
    fe80::/10), ``unspecified``, ``multicast`` or ``reserved`` (anything else that is
    not globally routable). IPv6 forms that embed an IPv4 address (IPv4-mapped
    ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by the
    embedded address."""
    if isinstance(ip, ipaddress.IPv6Address):
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])  # drop any scope id
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return classify_address(embedded)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip.is_loopback:
        return "loopback"
    if any(ip in net for net in _LINK_LOCAL_NETS):
        return "link_local"
    if any(ip in net for net in _PRIVATE_NETS):
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


Resolver = Callable[..., Iterable[tuple[Any, ...]]]


def _addresses(host: str, port: int, resolver: Resolver) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DestinationRefused(f"webhook host {host!r} does not resolve: {exc}") from None
    out: list[IPAddress] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]
        try:
            out.append(ipaddress.ip_address(addr))
        except ValueError:
            raise DestinationRefused(
                f"webhook host {host!r} resolved to a non-IP address {addr!r}"
            ) from None
    if not out:
        raise DestinationRefused(f"webhook host {host!r} resolved to no address")
    return out


def check_destination(
    url: str, allow: Collection[str] = (), *, resolver: Resolver = socket.getaddrinfo
) -> None:
    """Refuse a webhook URL that would reach the gateway's own networks.

    ``url`` must be ``http``/``https`` with a host and no userinfo. An IP literal is
    judged as is; a name is resolved (``socket.getaddrinfo``) and *every* address is
    judged by :func:`classify_address`. ``loopback``, ``private`` and ``link_local``
    pass only when named in ``allow``; ``unspecified``, ``multicast`` and ``reserved``
    never pass. Raises :class:`DestinationRefused` (a :class:`ConfigError`), also when
    the name does not resolve. The answer can change between this check and the
    connection (DNS rebinding); the worker re-checks right before each send.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise DestinationRefused(f"webhook URL is malformed: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise DestinationRefused(f"webhook URL must be http or https, got {parts.scheme!r}")
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("webhook URL must not carry credentials (use the secret)")
    host = parts.hostname
    if not host:
        raise DestinationRefused("webhook URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("webhook URL has an invalid port") from None
    for ip in _addresses(host, port, resolver):
        category = classify_address(ip)
        if category is None:
            continue
        if category in ALLOW_CATEGORIES and category in allow:
            continue
        hint = (
            f" (add {category!r} to allow_networks to permit it)"
            if category in ALLOW_CATEGORIES
            else ""
        )
        raise DestinationRefused(
            f"webhook host {host!r} resolves to {ip} ({category}), which is refused{hint}"
        )


# -- configuration ----------------------------------------------------------------------

_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
_OPERATION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,255}$"


SigningMode = Literal["rfc9421", "hmac-sha256"]
SIGNING_MODES: tuple[str, ...] = get_args(SigningMode)


class WebhookConfig(BaseModel):
    """One webhook subscriber.

    ``id``: ``^[A-Za-z0-9_.:-]{1,64}$``, unique in the file. ``url``: http(s), no
    userinfo. ``signing``: how deliveries are signed — ``rfc9421`` (AdCP's default
    webhook profile: Warden's own Ed25519 key, published in its JWKS; no shared
    secret) or ``hmac-sha256`` (the deprecated legacy scheme, with ``secret``). Left
    out, it is ``hmac-sha256`` when a ``secret`` is given (files written before issue
    21 keep working) and ``rfc9421`` otherwise. A delivery is never signed both ways:
    ``rfc9421`` with a ``secret`` is refused. ``secret``: the HMAC key (≥ 32 bytes,
    see :func:`check_secret`), kept as a ``SecretStr`` so it never shows in a repr.
    ``events``: the approval-task events to send (None = all of :data:`EVENTS`).
    ``operation_id``: echoed into every payload (``^[A-Za-z0-9_.:-]{1,255}$``); the
    task id is used when absent.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: StrictStr = Field(pattern=_ID_PATTERN)
    url: StrictStr
    signing: SigningMode | None = None
    secret: SecretStr | None = None
    events: tuple[Event, ...] | None = Field(default=None, min_length=1)
    operation_id: StrictStr | None = Field(default=None, pattern=_OPERATION_ID_PATTERN)

    @model_validator(mode="after")
    def _one_signing_mode(self) -> WebhookConfig:
        if self.signing == "hmac-sha256" and self.secret is None:
            raise ValueError("signing hmac-sha256 needs a secret")
        if self.signing == "rfc9421" and self.secret is not None:
            raise ValueError(
                "signing rfc9421 takes no secret (a delivery is never signed both ways)"
            )
        return self

    @property
    def mode(self) -> SigningMode:
        """The effective signing mode (see the class docstring)."""
        if self.signing is not None:
            return self.signing
        return "hmac-sha256" if self.secret is not None else "rfc9421"

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)  # ValueError for a malformed URL is reported by pydantic
        if parts.scheme not in ("http", "https"):
            raise ValueError("must be an http:// or https:// URL")
        if not parts.hostname:
            raise ValueError("has no host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry credentials (use the secret)")
        try:
            _ = parts.port
        except ValueError:
            raise ValueError("has an invalid port") from None
        return value

    @field_validator("secret", mode="before")
    @classmethod
    def _strong_secret(cls, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, str):
            raise ValueError("must be a string")
        try:
            check_secret(value)
        except WeakSecret as exc:
            raise ValueError(exc.message) from None
        return value

    def wants(self, event: str) -> bool:
        """True when this webhook subscribes to ``event``."""
        return self.events is None or event in self.events


class WebhooksFile(BaseModel):
    """A webhooks file: ``{webhooks: [WebhookConfig…], allow_networks: [category…]}``.

    ``allow_networks`` (default empty) lists the address categories destinations may
    resolve to besides public ones: ``loopback``, ``private``, ``link_local``.
    Building it directly checks ids are unique but does not resolve URLs; use
    :func:`load_webhooks` for a file.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhooks: tuple[WebhookConfig, ...] = ()
    allow_networks: tuple[AllowCategory, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> WebhooksFile:
        dups = _duplicates(w.id for w in self.webhooks)
        if dups:
            raise ValueError(f"duplicate webhook ids: {', '.join(dups)}")
        return self

    @property
    def allow(self) -> frozenset[str]:
        return frozenset(self.allow_networks)

    def get(self, webhook_id: str) -> WebhookConfig | None:
        """The webhook with ``webhook_id``, or None."""
        for w in self.webhooks:
            if w.id == webhook_id:
                return w
        return None


def _duplicates(ids: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    dups: list[str] = []
    for i in ids:
        if i in seen and i not in dups:
            dups.append(i)
        seen.add(i)
    return dups


def _errors(where: str, exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_input=False):
        loc = ".".join(str(p) for p in err["loc"])
        out.append(f"{where}{': ' + loc if loc else ''}: {err['msg']}")
    return out


def parse_webhooks(
    text: str, *, source: str = "<webhooks>", resolver: Resolver = socket.getaddrinfo
) -> WebhooksFile:
    """Parse and check a webhooks file (YAML, safe loader, repeated keys refused).

    Every problem is collected and reported at once: YAML errors, unknown or missing
    fields, bad ids/URLs/events, weak secrets, duplicate ids, and destinations refused
    by :func:`check_destination` under the file's ``allow_networks`` (resolved now).
    Raises :class:`ConfigError` (``data["problems"]`` lists them); secrets never appear
    in messages.
    """
    try:
        doc = strict_yaml.load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: must be a YAML mapping with a 'webhooks' list")
    problems: list[str] = []
    unknown = sorted(str(k) for k in doc if k not in ("webhooks", "allow_networks"))
    if unknown:
        problems.append(f"{source}: unknown fields: {', '.join(unknown)}")
    allow: tuple[AllowCategory, ...] = ()
    try:
        allow = WebhooksFile.model_validate(
            {"allow_networks": doc.get("allow_networks") or ()}
        ).allow_networks
    except ValidationError as exc:
        problems += _errors(source, exc)
    raw_hooks = doc.get("webhooks")
    if raw_hooks is None:
        raw_hooks = []
    if not isinstance(raw_hooks, list):
        problems.append(f"{source}: webhooks: must be a list")
        raw_hooks = []
    hooks: list[WebhookConfig] = []
    for i, raw in enumerate(raw_hooks):
        where = f"{source}: webhook #{i + 1}"
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            where += f" ({raw['id']})"
        try:
            hook = WebhookConfig.model_validate(raw)
        except ValidationError as exc:
            problems += _errors(where, exc)
            continue
        try:
            check_destination(hook.url, allow, resolver=resolver)
        except DestinationRefused as exc:
            problems.append(f"{where}: url: {exc.message}")
        hooks.append(hook)
    dups = _duplicates(h.id for h in hooks)
    if dups:
        problems.append(f"{source}: duplicate webhook ids: {', '.join(dups)}")
    if problems:
        raise ConfigError(
            f"{source}: {len(problems)} problem(s):\n  " + "\n  ".join(problems),
            problems=problems,
        )
    return WebhooksFile(webhooks=tuple(hooks), allow_networks=allow)


def load_webhooks(path: str | Path, *, resolver: Resolver = socket.getaddrinfo) -> WebhooksFile:
    """Read and check the webhooks file at ``path`` (see :func:`parse_webhooks`).

    Raises :class:`ConfigError` when it cannot be read or has any problem.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the webhooks file {p}: {exc}") from None
    return parse_webhooks(text, source=str(p), resolver=resolver)
