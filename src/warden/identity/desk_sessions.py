"""Approval-desk sessions kept in the database, so that logging out ends a session on
the server and not only in the browser.

A session id is 32 random bytes (URL-safe base64, 43 characters) carried in the signed
desk cookie; the database keeps its SHA-256 (hex) beside the API key id and the end
of the session. A session is live while its row exists and has not expired: logging
out deletes the row, revoking the key deletes every row of the key
(:meth:`warden.identity.api_keys.ApiKeys.revoke`, same transaction), and each login
purges rows past their end. Every replica on the database sees the same rows, so a
copied cookie stops working everywhere at once (docs/decisions.md, Hardening:
approvals).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from hashlib import sha256
from typing import TYPE_CHECKING

from warden.store.api_keys_sql import read_cursor
from warden.store.desk_sessions_sql import SqlDeskSessions

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

#: Longest session id :meth:`DeskSessionStore.key_of` will hash; longer ones are unknown.
MAX_SESSION_ID_CHARS = 128


def _digest(session_id: str) -> str:
    return sha256(session_id.encode("utf-8")).hexdigest()


def _utc_now() -> datetime:
    return datetime.now(UTC)


class DeskSessionStore:
    """Desk sessions in ``store`` (an open :class:`~warden.store.sql.SqlStore`);
    ``clock`` returns aware datetimes. Store failures raise
    :class:`~warden.errors.StoreUnavailable`."""

    def __init__(self, store: SqlStore, clock: Callable[[], datetime] = _utc_now) -> None:
        self._store = store
        self._clock = clock

    def start(self, key_id: str, lifetime_s: float) -> str:
        """A new session of ``key_id`` lasting ``lifetime_s`` seconds: its id (for the
        cookie only; the database keeps its hash)."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock().astimezone(UTC)
        with self._store._write() as cur:  # noqa: SLF001 - one short write transaction
            table = SqlDeskSessions(cur, self._store._q)  # noqa: SLF001
            table.purge_expired(now.isoformat())
            table.insert(
                _digest(session_id),
                key_id,
                now.isoformat(),
                (now + timedelta(seconds=lifetime_s)).isoformat(),
            )
        return session_id

    def key_of(self, session_id: object) -> str | None:
        """The key id of a live session, or None (unknown, ended, expired, malformed)."""
        if not isinstance(session_id, str) or not 0 < len(session_id) <= MAX_SESSION_ID_CHARS:
            return None
        now = self._clock().astimezone(UTC).isoformat()
        with read_cursor(self._store) as cur:
            return SqlDeskSessions(cur, self._store._q).key_of(_digest(session_id), now)  # noqa: SLF001

    def end(self, session_id: object) -> None:
        """End one session (logging out); an unknown or malformed id is a no-op."""
        if not isinstance(session_id, str) or not 0 < len(session_id) <= MAX_SESSION_ID_CHARS:
            return
        with self._store._write() as cur:  # noqa: SLF001
            SqlDeskSessions(cur, self._store._q).delete(_digest(session_id))  # noqa: SLF001
