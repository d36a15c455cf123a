"""SQL for idempotency keys: :class:`SqlIdempotencyKeys` on the ``idempotency_keys``
table (migration 0003), inside the caller's open write transaction.

The claim is ``INSERT … ON CONFLICT (scope, idem_key) DO NOTHING``: the primary
key decides the first insert, on SQLite and PostgreSQL alike. Times are stored
as ISO 8601 UTC text; the key column holds the SHA-256 of the key, never the key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from warden.store.idempotency import IdempotencyRecord, IdempotencyState


class SqlIdempotencyKeys:
    """:class:`~warden.store.idempotency.IdempotencyKeys` on an open DB-API cursor."""

    def __init__(self, cur: Any, q: Any) -> None:
        self._cur = cur
        self._q = q

    def get(self, scope: str, key_digest: str) -> IdempotencyRecord | None:
        self._cur.execute(
            self._q(
                "SELECT request_hash, state, status_code, response, created_at, expires_at "
                "FROM idempotency_keys WHERE scope = ? AND idem_key = ?"
            ),
            (scope, key_digest),
        )
        row = self._cur.fetchone()
        if row is None:
            return None
        return IdempotencyRecord(
            scope=scope,
            key_digest=key_digest,
            request_hash=row[0],
            state=IdempotencyState(row[1]),
            status_code=row[2],
            response=row[3],
            created_at=datetime.fromisoformat(row[4]),
            expires_at=datetime.fromisoformat(row[5]),
        )

    def claim(
        self,
        scope: str,
        key_digest: str,
        request_hash: str,
        *,
        created_at: datetime,
        expires_at: datetime,
    ) -> bool:
        self._cur.execute(
            self._q(
                "INSERT INTO idempotency_keys (scope, idem_key, request_hash, state, "
                "created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (scope, idem_key) DO NOTHING"
            ),
            (
                scope,
                key_digest,
                request_hash,
                IdempotencyState.IN_FLIGHT.value,
                created_at.isoformat(),
                expires_at.isoformat(),
            ),
        )
        return bool(self._cur.rowcount == 1)

    def complete(self, scope: str, key_digest: str, status_code: int, response: str) -> None:
        self._cur.execute(
            self._q(
                "UPDATE idempotency_keys SET state = ?, status_code = ?, response = ? "
                "WHERE scope = ? AND idem_key = ? AND state = ?"
            ),
            (
                IdempotencyState.COMPLETED.value,
                status_code,
                response,
                scope,
                key_digest,
                IdempotencyState.IN_FLIGHT.value,
            ),
        )
        if self._cur.rowcount != 1:
            raise AssertionError(f"idempotency key {key_digest[:8]}… was not claimed in {scope}")

    def release(self, scope: str, key_digest: str) -> None:
        self._cur.execute(
            self._q("DELETE FROM idempotency_keys WHERE scope = ? AND idem_key = ? AND state = ?"),
            (scope, key_digest, IdempotencyState.IN_FLIGHT.value),
        )
