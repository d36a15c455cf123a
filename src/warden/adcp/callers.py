"""Who is calling the AdCP wire: an RFC 9421 signature (issue 21 item 3) or a Warden API
key, decided the same way on ``/adcp/<task>`` and ``/mcp`` (the wire's transports only
hand the request's method, URL, header lines and body here).

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
   For ``check_governance`` sent unsigned where the policy does not require a signature
   (``remember``), a key authenticated in the last 60 s is answered from memory
   (:meth:`~warden.identity.api_keys.ApiKeys.authenticate_remembered`) with the
   :class:`~warden.identity.api_keys.KeyStillLive` check the call's transaction makes
   (decision 810): a key revoked since is answered ``AUTH_INVALID``, as today.

A store failure while verifying is ``GOVERNANCE_UNAVAILABLE`` (503): fail closed.

Before any of this, a request carrying more than one API key — two ``Authorization``
lines, ``Authorization`` beside an ``x-adcp-auth`` that is another key, two
``x-adcp-auth`` — is refused ``AUTH_INVALID`` (:func:`one_key`, decision 840): nothing is
read or written for it, no nonce is spent. The same key in both carriers is one key (the
AdCP SDK's client sends it so); a signature beside one key stays allowed (step 2).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from warden.adcp.errors import AdcpError, unavailable
from warden.adcp.request_signing import RequestSigning
from warden.errors import CouldNotDecide, failure_log_level
from warden.identity.api_keys import ApiKeys, Identity, KeyStillLive
from warden.identity.credentials import header_lines, more_than_one

log = logging.getLogger(__name__)

#: The one task whose caller may be answered from memory (decision 810).
REMEMBERED_TASK = "check_governance"
#: The header lines that carry an API key on the AdCP wire (decision 840).
KEY_HEADERS = ("authorization", "x-adcp-auth")


class Caller(NamedTuple):
    """An identified caller, and the check its call's transaction must make when its
    key was answered from memory (None otherwise)."""

    who: Identity
    live: KeyStillLive | None = None


def credentials(headers: Any) -> str | None:
    """The API token a request presents (``Authorization: Bearer`` or ``x-adcp-auth``)."""
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    alt = (headers.get("x-adcp-auth") or "").strip()
    return alt or None


def one_key(headers: Any) -> None:
    """``AUTH_INVALID`` when ``headers`` (lines, a Starlette ``Headers`` or a mapping)
    carry more than one API key: which one counts would depend on order (decision 840).
    One key in both carriers, ``Authorization: Bearer T`` and ``x-adcp-auth: T``, is one
    credential: the AdCP SDK's client sends every key so."""
    lines = [(n, v.strip()) for n, v in header_lines(headers) if n in KEY_HEADERS and v.strip()]
    names = [n for n, _ in lines]
    keys = {_bearer(v) if n == "authorization" else v for n, v in lines}
    if len(set(names)) == len(names) and len(keys) == 1 and None not in keys:
        return
    message = more_than_one(names)
    if message is not None:
        raise AdcpError("AUTH_INVALID", message)


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def echoed_context(request: Any) -> dict[str, Any] | None:
    """The ``context`` a failure answers with: the request's, when the body parsed (a
    JSON object) and its ``context`` is an object (core/context.json), else None."""
    context = request.get("context") if isinstance(request, dict) else None
    return context if isinstance(context, dict) else None


def revoked_key() -> AdcpError:
    """``AUTH_INVALID``: the answer to an unknown or revoked key."""
    return AdcpError("AUTH_INVALID", "the API key is unknown or revoked")


def authenticate(keys: ApiKeys, headers: Any) -> Identity:
    """The caller's identity; ``AUTH_MISSING`` without a token, ``AUTH_INVALID`` for a
    token that is unknown or revoked, ``GOVERNANCE_UNAVAILABLE`` (503) when the key
    table cannot be read (the store is down: fail closed, never a 500); ``AUTH_INVALID``
    for more than one key (:func:`one_key`)."""
    one_key(headers)
    return _authenticate(keys, headers, remember=False).who


def _authenticate(keys: ApiKeys, headers: Any, *, remember: bool) -> Caller:
    token = credentials(headers)
    if token is None:
        raise AdcpError("AUTH_MISSING", "send Authorization: Bearer <Warden API key>")
    try:
        if remember:
            who, live = keys.authenticate_remembered(token)
        else:
            who, live = keys.authenticate(token), None
    except CouldNotDecide as exc:
        log.log(
            failure_log_level(exc),
            "adcp authentication could not read the store: %s",
            exc.diagnostics(),
        )
        raise unavailable() from exc
    if who is None:
        raise revoked_key()
    return Caller(who, live)


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
    return identify_caller(
        keys,
        signing,
        method=method,
        url=url,
        headers=headers,
        body=body,
        task=task,
        arguments=arguments,
    ).who


def identify_caller(
    keys: ApiKeys,
    signing: RequestSigning | None,
    *,
    method: str,
    url: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    task: str | None,
    arguments: Any,
    remember: bool = False,
) -> Caller:
    """:func:`identify`, and with ``remember`` (the call's transaction makes the check:
    :meth:`~warden.wire.adcp.service.AdcpService.call`'s ``live``) an unsigned
    ``check_governance``'s key answered from memory where the policy would accept it
    unsigned, so a revoked key gets the answer it gets today: ``AUTH_INVALID``."""
    one_key(headers)  # before the signature: a refused request spends no nonce
    fields: Mapping[str, str] = _Fields(headers)
    # Only where a revoked key's answer is AUTH_INVALID whatever else the request says:
    # not where a signature is required or a refused one is let through with a warning.
    remember = remember and task == REMEMBERED_TASK
    if signing is None or not signing.enabled:
        return _authenticate(keys, fields, remember=remember)
    remember = remember and signing.policy_mode(task) == "supported_for"
    answered: list[Caller] = []

    def fallback() -> Identity | None:
        if credentials(fields) is None:
            return None
        try:
            answered.append(_authenticate(keys, fields, remember=remember))
        except AdcpError as exc:
            if exc.http_status == 503:
                raise
            return None
        return answered[-1].who

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
        return _authenticate(keys, fields, remember=False)  # raises AUTH_MISSING / _INVALID
    assert outcome.identity is not None
    if outcome.source == "signature" and credentials(fields) is not None:
        other = authenticate(keys, fields)
        if other.principal != outcome.identity.principal:
            raise AdcpError(
                "AUTH_INVALID", "the API key and the request signature name different callers"
            )
    if outcome.source == "fallback" and answered and answered[-1].who is outcome.identity:
        return answered[-1]
    return Caller(outcome.identity)


class _Fields(dict[str, str]):
    """Header lines as a lower-cased mapping (the last line of a name wins), for the API
    key lookup; the verifier reads the lines themselves."""

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in headers)


def still_live(live: KeyStillLive | None, failed: bool) -> None:
    """After a call answered with a key from memory: a failure answered before the
    call's transaction confirmed the key (a malformed request, a role refusal) is
    answered ``AUTH_INVALID`` if the key was revoked since, as it would be today (the
    key read on its own); ``GOVERNANCE_UNAVAILABLE`` if that read fails."""
    if live is None or not failed or live.confirmed:
        return
    try:
        alive = live.recheck()
    except CouldNotDecide as exc:
        log.log(failure_log_level(exc), "adcp key check could not read the store: %s", exc)
        raise unavailable() from exc
    if not alive:
        raise revoked_key()
