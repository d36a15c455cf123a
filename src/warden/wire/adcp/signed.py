"""Who is calling the AdCP wire: an RFC 9421 signature (issue 21 item 3) or a Warden API
key, decided the same way on ``/adcp/<task>`` and ``/mcp``.

1. With request signing on (:class:`~warden.adcp.request_signing.RequestSigning`), the
   request is put through the verifier checklist first, on the exact bytes received,
   against the URL Warden is reachable at (``public_url`` + the request's path and
   query: the ``Host`` header is the caller's to choose, so it does not name Warden).
   A refused signature is a 401 in AdCP's error envelope whose code is the checklist's
   (``request_signature_window_invalid`` …), with ``WWW-Authenticate: Signature
   error="<code>"``; it is never downgraded to bearer authentication.
2. A verified signature authenticates the call as the key's agent. An API key sent
   beside it must belong to the same principal (``AUTH_INVALID`` otherwise).
3. An unsigned call (allowed by the policy) authenticates with its API key as before.

A store failure while verifying is ``GOVERNANCE_UNAVAILABLE`` (503): fail closed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from warden.adcp.errors import AdcpError
from warden.adcp.request_signing import RequestSigning
from warden.errors import CouldNotDecide, failure_log_level
from warden.identity.api_keys import ApiKeys, Identity
from warden.wire.adcp.envelope import unavailable

log = logging.getLogger(__name__)


def request_url(public_url: str, raw_path: bytes, query: bytes) -> str:
    """The absolute URL a signer addressed: Warden's public base, then the request's
    path and query exactly as received."""
    path = raw_path.decode("latin-1")
    q = query.decode("latin-1")
    return public_url.rstrip("/") + path + ("?" + q if q else "")


def lenient_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def credentials(headers: Any) -> str | None:
    """The API token a request presents (``Authorization: Bearer`` or ``x-adcp-auth``)."""
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    alt = (headers.get("x-adcp-auth") or "").strip()
    return alt or None


def authenticate(keys: ApiKeys, headers: Any) -> Identity:
    """The caller's identity; ``AUTH_MISSING`` without a token, ``AUTH_INVALID`` for a
    token that is unknown or revoked, ``GOVERNANCE_UNAVAILABLE`` (503) when the key
    table cannot be read (the store is down: fail closed, never a 500)."""
    token = credentials(headers)
    if token is None:
        raise AdcpError("AUTH_MISSING", "send Authorization: Bearer <Warden API key>")
    try:
        who = keys.authenticate(token)
    except CouldNotDecide as exc:
        log.log(
            failure_log_level(exc),
            "adcp authentication could not read the store: %s",
            exc.diagnostics(),
        )
        raise unavailable() from exc
    if who is None:
        raise AdcpError("AUTH_INVALID", "the API key is unknown or revoked")
    return who


def identify(
    keys: ApiKeys,
    signing: RequestSigning | None,
    *,
    method: str,
    url: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    task: str | None,
    arguments: Any,
) -> Identity:
    """The caller of one AdCP request (see the module docstring). Raises
    :class:`~warden.adcp.errors.AdcpError`: a ``request_signature_*`` code (401),
    ``AUTH_MISSING``/``AUTH_INVALID`` (401) or ``GOVERNANCE_UNAVAILABLE`` (503)."""
    fields: Mapping[str, str] = _Fields(headers)
    if signing is None or not signing.enabled:
        return authenticate(keys, fields)

    def fallback() -> Identity | None:
        if credentials(fields) is None:
            return None
        try:
            return authenticate(keys, fields)
        except AdcpError as exc:
            if exc.http_status == 503:
                raise
            return None

    try:
        outcome = signing.authenticate(
            method=method,
            url=url,
            headers=headers,
            body=body,
            task=task,
            arguments=arguments,
            fallback=fallback,
        )
    except CouldNotDecide as exc:
        log.log(failure_log_level(exc), "adcp signature check failed: %s", exc.diagnostics())
        raise unavailable() from exc
    if outcome.action == "reject":
        assert outcome.error_code is not None
        details = {"step": outcome.rejection.step} if outcome.rejection is not None else None
        raise AdcpError(
            outcome.error_code,
            f"RFC 9421 signature refused: {outcome.message}",
            details=details,
        )
    if outcome.action == "reject_unauthenticated":
        return authenticate(keys, fields)  # raises AUTH_MISSING / AUTH_INVALID
    assert outcome.identity is not None
    if outcome.source == "signature" and credentials(fields) is not None:
        other = authenticate(keys, fields)
        if other.principal != outcome.identity.principal:
            raise AdcpError(
                "AUTH_INVALID", "the API key and the request signature name different callers"
            )
    return outcome.identity


def www_authenticate(code: str) -> str:
    """The ``WWW-Authenticate`` value of a 401 with ``code``."""
    if code.startswith("request_signature_"):
        return f'Signature error="{code}"'
    return 'Bearer realm="warden"'


class _Fields(dict[str, str]):
    """Header lines as a lower-cased mapping (the last line of a name wins), for the API
    key lookup; the verifier reads the lines themselves."""

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in headers)
