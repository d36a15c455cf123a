"""Who may call the spend wire: one bearer token (``<data-dir>/api.token``).

Until the approval desk (issue 4) brings API keys with roles, every ``/v1``
route requires ``Authorization: Bearer <token>``; the token is compared in
constant time. A missing or wrong token is ``401 auth:required`` with an
``authenticate`` resolution. The principal that scopes idempotency keys is a
digest of the token, so a key is never shared across credentials.
"""

from __future__ import annotations

import hmac

from warden.crypto.canonical import sha256_hex
from warden.crypto.keystore import MIN_TOKEN_CHARS
from warden.errors import ConfigError
from warden.wire.spend.models import Resolution
from warden.wire.spend.render import Refusal

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="warden"'}


class BearerAuth:
    """Checks ``Authorization`` headers against the one configured token."""

    def __init__(self, token: str) -> None:
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(f"the API token must be at least {MIN_TOKEN_CHARS} characters")
        self._token = token.encode("utf-8")
        #: Stable, non-secret name of the credential (scopes idempotency keys).
        self.principal = "token:" + sha256_hex(self._token)[:16]

    def check(self, authorization: str | None) -> str:
        """The principal, or :class:`Refusal` ``auth:required`` (401)."""
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        presented = credentials.strip().encode("utf-8", errors="replace")
        # compare_digest on every path, so a missing scheme costs what a wrong token does
        ok = hmac.compare_digest(presented, self._token)
        if scheme.lower() != "bearer" or not ok:
            raise Refusal(
                "auth:required",
                401,
                "missing or invalid bearer token"
                if authorization
                else "this route requires an API token",
                resolution=Resolution(
                    type="authenticate",
                    hint="send Authorization: Bearer <token>; Warden writes the token to "
                    "<data-dir>/api.token (mode 0600) on first start",
                ),
                headers=CHALLENGE,
            )
        return self.principal
