"""SQL for AdCP RFC 9421 signed requests (migration 0013): :class:`SqlSigningKeys` on
``adcp_signing_keys`` and :class:`SqlNonces` on ``adcp_signature_nonces``.

Runs on a DB-API cursor the caller owns (a write transaction or a read cursor), like
:mod:`warden.store.agents_sql`. ``q`` adapts ``?`` placeholders to the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``(kid, agent_id, jwk_json, created_at, revoked_at)``
SigningKeyRow = tuple[str, str, str, str, str | None]
_COLUMNS = "kid, agent_id, jwk, created_at, revoked_at"


def _row(row: Any) -> SigningKeyRow:
    return (str(row[0]), str(row[1]), str(row[2]), str(row[3]), row[4])


class SqlSigningKeys:
    """Agents' registered JWKs."""

    def __init__(self, cur: Any, q: Callable[[str], str]) -> None:
        self._cur = cur
        self._q = q

    def insert(self, kid: str, agent_id: str, jwk_json: str, created_at: str) -> bool:
        """Insert an active key; False (nothing written) if the kid is taken."""
        self._cur.execute(
            self._q(
                f"INSERT INTO adcp_signing_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, NULL) "
                "ON CONFLICT (kid) DO NOTHING"
            ),
            (kid, agent_id, jwk_json, created_at),
        )
        return bool(self._cur.rowcount == 1)

    def key(self, kid: str) -> SigningKeyRow | None:
        self._cur.execute(
            self._q(f"SELECT {_COLUMNS} FROM adcp_signing_keys WHERE kid = ?"), (kid,)
        )
        row = self._cur.fetchone()
        return _row(row) if row is not None else None

    def keys_of(self, agent_id: str) -> list[SigningKeyRow]:
        self._cur.execute(
            self._q(
                f"SELECT {_COLUMNS} FROM adcp_signing_keys WHERE agent_id = ? "
                "ORDER BY created_at, kid"
            ),
            (agent_id,),
        )
        return [_row(r) for r in self._cur.fetchall()]

    def revoke(self, kid: str, revoked_at: str) -> None:
        """Revoke ``kid`` (an earlier ``revoked_at`` is kept)."""
        self._cur.execute(
            self._q(
                "UPDATE adcp_signing_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE kid = ?"
            ),
            (revoked_at, kid),
        )


class SqlNonces:
    """The replay cache: one row per accepted ``(keyid, nonce)`` until ``expires_at``."""

    def __init__(self, cur: Any, q: Callable[[str], str]) -> None:
        self._cur = cur
        self._q = q

    def remember(self, keyid: str, nonce: str, expires_at: int, now: int) -> bool:
        """Record the pair; False if a live row already holds it (a replay). An expired
        row for the pair is replaced. Atomic under concurrent callers: the primary key
        lets exactly one insert win."""
        self._cur.execute(
            self._q(
                "DELETE FROM adcp_signature_nonces WHERE keyid = ? AND nonce = ? AND expires_at < ?"
            ),
            (keyid, nonce, now),
        )
        self._cur.execute(
            self._q(
                "INSERT INTO adcp_signature_nonces (keyid, nonce, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (keyid, nonce) DO NOTHING"
            ),
            (keyid, nonce, expires_at),
        )
        return bool(self._cur.rowcount == 1)

    def live(self, keyid: str, now: int, limit: int) -> int:
        """How many unexpired entries ``keyid`` has, counting at most ``limit``."""
        self._cur.execute(
            self._q(
                "SELECT COUNT(*) FROM (SELECT 1 FROM adcp_signature_nonces "
                "WHERE keyid = ? AND expires_at >= ? LIMIT ?) AS live"
            ),
            (keyid, now, limit),
        )
        row = self._cur.fetchone()
        return int(row[0]) if row is not None else 0

    def purge(self, now: int) -> int:
        """Delete every expired entry; how many."""
        self._cur.execute(self._q("DELETE FROM adcp_signature_nonces WHERE expires_at < ?"), (now,))
        return int(self._cur.rowcount or 0)
