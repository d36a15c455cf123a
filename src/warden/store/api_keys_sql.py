"""SQL for API keys: :class:`SqlApiKeys` on the ``api_keys`` table (migration 0004).

Runs on a DB-API cursor the caller owns: inside a write transaction
(:meth:`SqlStore._write`) for changes, or on a plain read cursor
(:func:`read_cursor`) for lookups. Rows are plain tuples
``(key_id, principal, role, groups_json, created_at, revoked_at)``; the
identity layer (:mod:`warden.identity.api_keys`) gives them meaning. The
secret hash is written and matched here but never returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from warden.errors import StoreUnavailable
from warden.store.agents_sql import AgentRow, _agent

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

#: ``(key_id, principal, role, groups_json, created_at, revoked_at)``
ApiKeyRow = tuple[str, str, str, str, str, str | None]

_COLUMNS = "key_id, principal, role, groups, created_at, revoked_at"


@contextmanager
def read_cursor(store: SqlStore) -> Iterator[Any]:
    """A cursor on the store's connection for one autocommit read (no write lock).

    Mirrors :meth:`SqlStore.load_session`: the store's lock is held throughout and
    driver errors become :class:`StoreUnavailable`.
    """
    with store._lock:
        cur = store._cursor()
        try:
            yield cur
        except Exception as exc:
            if isinstance(exc, StoreUnavailable):
                raise
            raise StoreUnavailable(f"store error: {exc.__class__.__name__}: {exc}") from exc
        finally:
            cur.close()


def _row(row: Any) -> ApiKeyRow:
    return (str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), row[5])


#: A key still usable (qmark style): unrevoked, and an agent key's agent registered and
#: unrevoked; one row if so, none otherwise.
LIVE_KEY = (
    "SELECT 1 FROM api_keys k LEFT JOIN agents a ON k.role = 'agent' AND a.agent_id = k.principal "
    "WHERE k.key_id = ? AND k.revoked_at IS NULL "
    "AND (k.role <> 'agent' OR (a.agent_id IS NOT NULL AND a.revoked_at IS NULL))"
)


class SqlApiKeys:
    """The ``api_keys`` table on an open DB-API cursor (``q`` adapts ``?`` placeholders)."""

    def __init__(self, cur: Any, q: Callable[[str], str]) -> None:
        self._cur = cur
        self._q = q

    def insert(
        self,
        *,
        key_id: str,
        principal: str,
        role: str,
        groups_json: str,
        secret_hash: str,
        created_at: str,
    ) -> None:
        """Insert one active key (the caller has checked key_id and hash are unused)."""
        self._cur.execute(
            self._q(
                "INSERT INTO api_keys (key_id, principal, role, groups, secret_hash, "
                "created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, NULL)"
            ),
            (key_id, principal, role, groups_json, secret_hash, created_at),
        )

    def key_id_taken(self, key_id: str) -> bool:
        self._cur.execute(self._q("SELECT 1 FROM api_keys WHERE key_id = ?"), (key_id,))
        return self._cur.fetchone() is not None

    def by_hash(self, secret_hash: str) -> tuple[ApiKeyRow, str] | None:
        """The row whose stored hash is ``secret_hash`` and that stored hash, or None."""
        self._cur.execute(
            self._q(f"SELECT {_COLUMNS}, secret_hash FROM api_keys WHERE secret_hash = ?"),
            (secret_hash,),
        )
        row = self._cur.fetchone()
        return (_row(row), str(row[6])) if row is not None else None

    def by_hash_with_agent(self, secret_hash: str) -> tuple[ApiKeyRow, str, AgentRow | None] | None:
        """:meth:`by_hash` and, for an ``agent`` key, its agent's row (``agent_id, owner,
        groups, budgets, created_at, revoked_at``; None if unregistered) in one statement:
        one round trip where two were (decision 684)."""
        self._cur.execute(
            self._q(
                "SELECT k.key_id, k.principal, k.role, k.groups, k.created_at, k.revoked_at, "
                "k.secret_hash, a.agent_id, a.owner, a.groups, a.budgets, a.created_at, "
                "a.revoked_at FROM api_keys k LEFT JOIN agents a "
                "ON k.role = 'agent' AND a.agent_id = k.principal WHERE k.secret_hash = ?"
            ),
            (secret_hash,),
        )
        row = self._cur.fetchone()
        if row is None:
            return None
        agent = _agent(row[7:13]) if row[7] is not None else None
        return _row(row), str(row[6]), agent

    def by_key_id(self, key_id: str) -> ApiKeyRow | None:
        self._cur.execute(self._q(f"SELECT {_COLUMNS} FROM api_keys WHERE key_id = ?"), (key_id,))
        row = self._cur.fetchone()
        return _row(row) if row is not None else None

    def all(self) -> list[ApiKeyRow]:
        """Every key, oldest first."""
        self._cur.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, key_id")
        return [_row(r) for r in self._cur.fetchall()]

    def revoke(self, key_id: str, revoked_at: str) -> bool:
        """Mark ``key_id`` revoked if it is active: True if this call revoked it, False if
        it is unknown or already revoked (its first ``revoked_at`` is kept)."""
        self._cur.execute(
            self._q("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL"),
            (revoked_at, key_id),
        )
        return bool(self._cur.rowcount)
