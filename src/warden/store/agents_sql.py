"""SQL for the agent identity registry: :class:`SqlAgents` on ``agents`` and
``agent_keys`` (migration 0009).

Runs on a DB-API cursor the caller owns, like :mod:`warden.store.api_keys_sql`: inside
a write transaction for changes, or a plain read cursor for lookups. Rows are plain
tuples; :mod:`warden.identity.agents` gives them meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``(agent_id, owner, groups_json, budgets_json, created_at, revoked_at)``
AgentRow = tuple[str, str, str, str, str, str | None]
#: ``(key_id, agent_id, created_at, revoked_at)``
AgentKeyRow = tuple[str, str, str, str | None]

_AGENT_COLUMNS = "agent_id, owner, groups, budgets, created_at, revoked_at"
_KEY_COLUMNS = "key_id, agent_id, created_at, revoked_at"


def _agent(row: Any) -> AgentRow:
    return (str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), row[5])


def _key(row: Any) -> AgentKeyRow:
    return (str(row[0]), str(row[1]), str(row[2]), row[3])


class SqlAgents:
    """The ``agents`` and ``agent_keys`` tables on an open cursor (``q`` adapts ``?``)."""

    def __init__(self, cur: Any, q: Callable[[str], str]) -> None:
        self._cur = cur
        self._q = q

    def insert_agent(
        self, agent_id: str, owner: str, groups_json: str, budgets_json: str, created_at: str
    ) -> bool:
        """Insert an active agent; False (nothing written) if the id is taken."""
        self._cur.execute(
            self._q(
                f"INSERT INTO agents ({_AGENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL) "
                "ON CONFLICT (agent_id) DO NOTHING"
            ),
            (agent_id, owner, groups_json, budgets_json, created_at),
        )
        return bool(self._cur.rowcount == 1)

    def agent(self, agent_id: str) -> AgentRow | None:
        self._cur.execute(
            self._q(f"SELECT {_AGENT_COLUMNS} FROM agents WHERE agent_id = ?"), (agent_id,)
        )
        row = self._cur.fetchone()
        return _agent(row) if row is not None else None

    def agents(self) -> list[AgentRow]:
        """Every agent, by id."""
        self._cur.execute(f"SELECT {_AGENT_COLUMNS} FROM agents ORDER BY agent_id")
        return [_agent(r) for r in self._cur.fetchall()]

    def revoke_agent(self, agent_id: str, revoked_at: str) -> None:
        """Revoke the agent and every key of it — ACS keys and AdCP RFC 9421 signing keys
        (migration 0013) — (an earlier ``revoked_at`` is kept)."""
        for table in ("agents", "agent_keys", "adcp_signing_keys"):
            self._cur.execute(
                self._q(
                    f"UPDATE {table} SET revoked_at = COALESCE(revoked_at, ?) WHERE agent_id = ?"
                ),
                (revoked_at, agent_id),
            )

    def insert_key(
        self,
        key_id: str,
        agent_id: str,
        created_at: str,
        public_key: tuple[str, str] | None = None,
    ) -> None:
        """Insert an active key; ``public_key`` ``(algorithm, base64 SPKI DER)`` makes it
        an asymmetric (ACS-Crypto) key, None an HMAC key (migration 0012)."""
        algorithm, spki = public_key if public_key is not None else (None, None)
        self._cur.execute(
            self._q(
                f"INSERT INTO agent_keys ({_KEY_COLUMNS}, algorithm, public_key) "
                "VALUES (?, ?, ?, NULL, ?, ?)"
            ),
            (key_id, agent_id, created_at, algorithm, spki),
        )

    def public_key(self, key_id: str) -> tuple[str, str] | None:
        """``(algorithm, base64 SPKI DER)`` of an asymmetric key; None for an HMAC key
        or an unknown one."""
        self._cur.execute(
            self._q("SELECT algorithm, public_key FROM agent_keys WHERE key_id = ?"), (key_id,)
        )
        row = self._cur.fetchone()
        if row is None or row[0] is None or row[1] is None:
            return None
        return str(row[0]), str(row[1])

    def revoke_keys(self, agent_id: str, revoked_at: str, *, keep: str | None = None) -> None:
        """Revoke every active key of ``agent_id`` except ``keep``."""
        self._cur.execute(
            self._q(
                "UPDATE agent_keys SET revoked_at = ? "
                "WHERE agent_id = ? AND revoked_at IS NULL AND key_id <> ?"
            ),
            (revoked_at, agent_id, keep or ""),
        )

    def key(self, key_id: str) -> AgentKeyRow | None:
        self._cur.execute(
            self._q(f"SELECT {_KEY_COLUMNS} FROM agent_keys WHERE key_id = ?"), (key_id,)
        )
        row = self._cur.fetchone()
        return _key(row) if row is not None else None

    def keys_of(self, agent_id: str) -> list[AgentKeyRow]:
        """The keys of ``agent_id``, oldest first."""
        self._cur.execute(
            self._q(
                f"SELECT {_KEY_COLUMNS} FROM agent_keys WHERE agent_id = ? "
                "ORDER BY created_at, key_id"
            ),
            (agent_id,),
        )
        return [_key(r) for r in self._cur.fetchall()]

    def key_active(self, key_id: str) -> bool:
        """True while ``key_id`` and its agent are both unrevoked: the check every
        authenticated ACS write makes in its own transaction."""
        self._cur.execute(
            self._q(
                "SELECT 1 FROM agent_keys k JOIN agents a ON a.agent_id = k.agent_id "
                "WHERE k.key_id = ? AND k.revoked_at IS NULL AND a.revoked_at IS NULL"
            ),
            (key_id,),
        )
        return self._cur.fetchone() is not None

    def revoke_api_keys(self, agent_id: str, revoked_at: str) -> list[str]:
        """Revoke the ``agent``-role API keys whose principal is ``agent_id``; their ids."""
        self._cur.execute(
            self._q(
                "SELECT key_id FROM api_keys WHERE principal = ? AND role = 'agent' "
                "AND revoked_at IS NULL"
            ),
            (agent_id,),
        )
        ids = [str(r[0]) for r in self._cur.fetchall()]
        for key_id in ids:
            self._cur.execute(
                self._q("UPDATE api_keys SET revoked_at = ? WHERE key_id = ?"),
                (revoked_at, key_id),
            )
            self._cur.execute(self._q("DELETE FROM desk_sessions WHERE key_id = ?"), (key_id,))
        return ids
