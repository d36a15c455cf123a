"""SQL for approval-desk sessions: :class:`SqlDeskSessions` on the ``desk_sessions``
table (migration 0007), on a DB-API cursor the caller owns (a write transaction for
changes, :func:`warden.store.api_keys_sql.read_cursor` for lookups).

Rows are ``(session_hash, key_id, created_at, expires_at)``; times are RFC 3339 UTC
with a fixed offset, so text order is time order. The session id itself is never
stored, only its SHA-256 (:mod:`warden.identity.desk_sessions`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class SqlDeskSessions:
    """The ``desk_sessions`` table on an open cursor (``q`` adapts ``?`` placeholders)."""

    def __init__(self, cur: Any, q: Callable[[str], str]) -> None:
        self._cur = cur
        self._q = q

    def insert(self, session_hash: str, key_id: str, created_at: str, expires_at: str) -> None:
        self._cur.execute(
            self._q(
                "INSERT INTO desk_sessions (session_hash, key_id, created_at, expires_at) "
                "VALUES (?, ?, ?, ?)"
            ),
            (session_hash, key_id, created_at, expires_at),
        )

    def key_of(self, session_hash: str, now: str) -> str | None:
        """The key id of a live session (not expired at ``now``), or None."""
        self._cur.execute(
            self._q("SELECT key_id FROM desk_sessions WHERE session_hash = ? AND expires_at > ?"),
            (session_hash, now),
        )
        row = self._cur.fetchone()
        return str(row[0]) if row is not None else None

    def delete(self, session_hash: str) -> None:
        self._cur.execute(
            self._q("DELETE FROM desk_sessions WHERE session_hash = ?"), (session_hash,)
        )

    def delete_for_key(self, key_id: str) -> int:
        """End every session of ``key_id``; how many there were."""
        self._cur.execute(self._q("DELETE FROM desk_sessions WHERE key_id = ?"), (key_id,))
        return int(self._cur.rowcount or 0)

    def purge_expired(self, now: str) -> int:
        """Delete sessions that ended before ``now``; how many."""
        self._cur.execute(self._q("DELETE FROM desk_sessions WHERE expires_at <= ?"), (now,))
        return int(self._cur.rowcount or 0)
