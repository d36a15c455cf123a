"""Who may call ``/v1``: API keys with roles, sent as ``Authorization: Bearer <token>``.

Keys are :mod:`warden.identity.api_keys` (stored as a keyed HMAC, never the token).
Roles: ``agent`` (spend, action requests, its own tasks), ``approver`` (the approval
desk), ``admin`` (everything, including defining budgets). Which budgets, reservations
and receipts a key may touch is :mod:`.ownership`: an admin key reads all of them but
spends only where it is bound itself. The bootstrap token
``<data-dir>/api.token`` is registered as an admin key at start-up.

A missing, unknown or revoked token is ``401 auth:required`` with an ``authenticate``
resolution, and so are two ``Authorization`` lines (decision 840); a key whose role
does not allow the route is ``403 auth:forbidden``.
The caller's identity is kept in a context variable for the request
(:func:`caller`), so the operations scope idempotency keys and tasks by it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from warden.identity.api_keys import ApiKeys, Identity, KeyStillLive, Role
from warden.identity.credentials import carried, more_than_one
from warden.wire.spend.models import Resolution
from warden.wire.spend.render import Refusal

AUTH = "authorization"
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="warden"'}

_CALLER: ContextVar[Identity | None] = ContextVar("warden_caller", default=None)
_LIVE: ContextVar[KeyStillLive | None] = ContextVar("warden_caller_check", default=None)
_F = TypeVar("_F", bound=Callable[..., Any])


def caller() -> Identity:
    """The authenticated identity of the request being served (set by :class:`KeyAuth`)."""
    who = _CALLER.get()
    if who is None:  # a route reached without authentication is a programming error
        raise RuntimeError("no authenticated caller in this context")
    return who


def unauthenticated(authorization: str | None, message: str | None = None) -> Refusal:
    """``401 auth:required``: no token, or one that is malformed, unknown or revoked."""
    return Refusal(
        "auth:required",
        401,
        message
        or (
            "missing, invalid or revoked bearer token"
            if authorization
            else "this route requires an API key"
        ),
        resolution=Resolution(
            type="authenticate",
            hint="send Authorization: Bearer <token>; create keys with `warden keys "
            "create`; the bootstrap admin token is <data-dir>/api.token (mode 0600)",
        ),
        headers=CHALLENGE,
    )


def key_check() -> KeyStillLive | None:
    """The check the request must make in its write transaction when its key was answered
    from memory (:meth:`KeyAuth.check` with ``remembered``), else None."""
    return _LIVE.get()


def checks_caller_in_transaction(endpoint: _F) -> _F:
    """Mark a route whose every answer comes from :meth:`~warden.wire.spend.operations.
    SpendWire.mutate`, which confirms a remembered key in its transaction
    (:func:`key_check`): its token may be answered from memory (decision 702)."""
    setattr(endpoint, "checks_caller_in_transaction", True)  # noqa: B010 - a function attribute
    return endpoint


class KeyAuth:
    """Checks ``Authorization`` headers against the API key store."""

    def __init__(self, keys: ApiKeys) -> None:
        self.keys = keys

    def check(
        self,
        authorization: str | list[str] | None,
        role: Role | None = Role.AGENT,
        *,
        remembered: bool = False,
    ) -> Identity:
        """The caller's identity (also set as :func:`caller`); raises :class:`Refusal`
        ``auth:required`` (401) or ``auth:forbidden`` (403). ``role`` None admits any
        valid key (the route checks what the caller may see). ``remembered``: the route
        confirms the key in its transaction (:func:`checks_caller_in_transaction`), so a
        key authenticated a moment ago may be answered from memory. ``authorization``
        may be every ``Authorization`` line: more than one is refused unread."""
        if isinstance(authorization, list):
            several = more_than_one(carried(((AUTH, v) for v in authorization), {AUTH}))
            if several is not None:
                raise unauthenticated("Bearer", several)
            authorization = next((v for v in authorization if v.strip()), None)
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        token = credentials.strip() if scheme.lower() == "bearer" else None
        live: KeyStillLive | None = None
        if token is None:
            who = None
        elif remembered:
            who, live = self.keys.authenticate_remembered(token)
            if live is not None and who is not None and role is not None and not who.may(role):
                who, live = self.keys.authenticate(token), None  # refused: from the database
        else:
            who = self.keys.authenticate(token)
        if who is None:
            raise unauthenticated(authorization)
        if role is not None and not who.may(role):
            raise Refusal(
                "auth:forbidden",
                403,
                f"the {who.role.value} key of {who.principal} may not use this route "
                f"(it needs the {role.value} role)",
                resolution=Resolution(
                    type="authenticate",
                    hint="use an admin key"
                    if role is Role.ADMIN
                    else f"use a key with the {role.value} or admin role",
                ),
            )
        _CALLER.set(who)
        _LIVE.set(live)
        return who
