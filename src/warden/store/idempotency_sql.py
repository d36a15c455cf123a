"""SQL for idempotency keys: :class:`SqlIdempotencyKeys` on the ``idempotency_keys``
table (migration 0003), inside the caller's open write transaction.

The claim is ``INSERT … ON CONFLICT (scope, idem_key) DO NOTHING``: the primary
key decides the first insert, on SQLite and PostgreSQL alike. Times are stored
as ISO 8601 UTC text; the key column holds the SHA-256 of the key, never the key.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from warden.store.idempotency import IdempotencyRecord, IdempotencyState

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

#: PostgreSQL: the claim and the row it did not overwrite, in one statement. The outer
#: SELECT sees the snapshot the statement started from, so it returns a committed row
#: that was there, and nothing for the row the insert just added.
_CLAIM_OR_GET = """
WITH ins AS (
  INSERT INTO idempotency_keys (scope, idem_key, request_hash, state, created_at, expires_at)
  VALUES (%(scope)s, %(key)s, %(hash)s, %(state)s, %(created)s, %(expires)s)
  ON CONFLICT (scope, idem_key) DO NOTHING
  RETURNING 1
)
SELECT (SELECT count(*) FROM ins), k.request_hash, k.state, k.status_code, k.response,
       k.created_at, k.expires_at
FROM (SELECT 1) AS one
LEFT JOIN idempotency_keys k ON k.scope = %(scope)s AND k.idem_key = %(key)s
"""


class SqlIdempotencyKeys:
    """:class:`~warden.store.idempotency.IdempotencyKeys` on an open DB-API cursor."""

    def __init__(self, cur: Any, q: Any, *, store: SqlStore | None = None) -> None:
        self._cur = cur
        self._q = q
        #: PostgreSQL: the store whose transaction this is (one-statement claim, release
        #: sent with COMMIT); None on SQLite (statement by statement, as before).
        self._store = store

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
        return self._record(scope, key_digest, row)

    def claim_or_get(
        self,
        scope: str,
        key_digest: str,
        request_hash: str,
        *,
        created_at: datetime,
        expires_at: datetime,
    ) -> tuple[bool, IdempotencyRecord | None]:
        """PostgreSQL: one statement, one round trip (decision 682): the insert, and the
        row as the statement's snapshot saw it (the committed row it did not overwrite;
        nothing when it inserted, or when a concurrent writer's row is not committed
        yet). SQLite: ``get``, then ``claim``."""
        if self._store is None:
            record = self.get(scope, key_digest)
            if record is not None:
                return False, record
            claimed = self.claim(
                scope, key_digest, request_hash, created_at=created_at, expires_at=expires_at
            )
            return claimed, None
        self._cur.execute(
            _CLAIM_OR_GET,
            {
                "scope": scope,
                "key": key_digest,
                "hash": request_hash,
                "state": IdempotencyState.IN_FLIGHT.value,
                "created": created_at.isoformat(),
                "expires": expires_at.isoformat(),
            },
        )
        row = self._cur.fetchone()
        if row is not None and int(row[0]) == 1:
            return True, None
        if row is None or row[1] is None:
            return False, None
        return False, self._record(scope, key_digest, row[1:])

    @staticmethod
    def _record(scope: str, key_digest: str, row: Any) -> IdempotencyRecord:
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
        sql = self._q("DELETE FROM idempotency_keys WHERE scope = ? AND idem_key = ? AND state = ?")
        args = (scope, key_digest, IdempotencyState.IN_FLIGHT.value)
        if self._store is not None:
            # Nothing reads the claim again in this transaction and its row count is not
            # needed: the delete goes with COMMIT, no round trip of its own (decision 682).
            self._store._defer(sql, args)  # noqa: SLF001
            return
        self._cur.execute(sql, args)
