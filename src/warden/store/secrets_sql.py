"""Server secrets kept in the database: random, generated once, shared by replicas.

A secret that an Observed Agent must not know cannot be derived from the IKM (under
ACS-Core every agent holds it). :func:`server_secret` returns the named 32-byte
secret, creating it from the OS CSPRNG on first use; the first insert wins, so
replicas starting together agree (table ``server_secrets``, migration 0004).
"""

from __future__ import annotations

import hmac
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from warden.errors import ConfigError

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

SECRET_BYTES = 32
#: The ``server_secrets`` row naming the IKM this database is written with.
KEY_FINGERPRINT = "ikm-fingerprint"


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


def bind_key_fingerprint(store: SqlStore, fingerprint: str) -> None:
    """Record which IKM writes this database, or refuse another one.

    ``fingerprint`` (hex) is derived from the IKM (never the IKM itself). The first
    Warden to start on a database records it; a later start with a different key file
    raises :class:`ConfigError` instead of writing chains no verifier can check (every
    replica must share the key file). Raises StoreUnavailable when the store fails.
    """
    with store._write() as cur:  # noqa: SLF001 - one short write transaction
        cur.execute(
            store._q(  # noqa: SLF001
                "INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING"
            ),
            (KEY_FINGERPRINT, fingerprint, datetime.now(UTC).isoformat()),
        )
        cur.execute(store._q("SELECT value FROM server_secrets WHERE name = ?"), (KEY_FINGERPRINT,))  # noqa: SLF001
        stored = cur.fetchone()[0]
    if not hmac.compare_digest(stored, fingerprint):
        raise ConfigError(
            "this database was written with another key file (IKM): every Warden on one "
            "database must use the same --key-file; refusing to start rather than write "
            "audit chains that would not verify"
        )
