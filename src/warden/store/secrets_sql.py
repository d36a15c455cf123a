"""Server secrets kept in the database: random, generated once, shared by replicas.

A secret that an Observed Agent must not know cannot be derived from the IKM (under
ACS-Core every agent holds it). :func:`server_secret` returns the named 32-byte
secret, creating it from the OS CSPRNG on first use; the first insert wins, so
replicas starting together agree (table ``server_secrets``, migration 0004).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

SECRET_BYTES = 32


def server_secret(store: SqlStore, name: str) -> bytes:
    """The secret ``name`` (32 bytes). Raises StoreUnavailable when the store fails."""
    with store._write() as cur:  # noqa: SLF001 - one short write transaction
        # First insert wins: replicas starting together all read the same value back.
        cur.execute(
            store._q(  # noqa: SLF001
                "INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING"
            ),
            (name, secrets.token_hex(SECRET_BYTES), datetime.now(UTC).isoformat()),
        )
        cur.execute(store._q("SELECT value FROM server_secrets WHERE name = ?"), (name,))  # noqa: SLF001
        return bytes.fromhex(cur.fetchone()[0])
