"""The readiness write probe: can this replica still write to its database?

``/readyz`` used to ask only ``SELECT 1``, which a database answers while it refuses
every write (a SQLite write lock held by another process, a read-only file or
volume, a PostgreSQL table lock or read-only standby). The probe runs one real write
(an ``INSERT`` into ``server_secrets`` under a unique throw-away name) in its own
transaction and rolls it back, so it changes nothing, bounded by a short lock wait
(SQLite ``busy_timeout``; PostgreSQL ``lock_timeout`` and ``statement_timeout``)
instead of the request path's 10 s / 5 s. See docs/decisions.md 190.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from warden.errors import StoreUnavailable

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

log = logging.getLogger(__name__)

#: How long the probe waits for a write lock before calling the store not writable (s).
WRITE_PROBE_TIMEOUT_S = 1.0

_INSERT = "INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?)"


def probe_write(store: SqlStore, timeout_s: float = WRITE_PROBE_TIMEOUT_S) -> None:
    """Begin a write transaction on ``store``'s connection, insert one row, roll back.

    Raises :class:`~warden.errors.StoreUnavailable` with reason ``store_not_writable``
    when the write cannot be made within ``timeout_s`` seconds (lock held, read-only
    database, disk errors the engine reports at the insert), and as the store's reads
    do when the database cannot be reached at all (reason ``store_unavailable``).
    """
    ms = max(1, int(timeout_s * 1000))
    sqlite = store.engine.dialect.name == "sqlite"
    row = (f"readyz-probe-{uuid.uuid4().hex}", "", datetime.now(UTC).isoformat())
    with store._lock:  # noqa: SLF001 - the probe runs on the store's own connection
        cur = store._cursor()  # noqa: SLF001 - raises StoreUnavailable when unreachable
        previous: int | None = None
        try:
            if sqlite:
                cur.execute("PRAGMA busy_timeout")
                previous = int(cur.fetchone()[0])
                cur.execute(f"PRAGMA busy_timeout={ms}")
                cur.execute("BEGIN IMMEDIATE")
            else:
                cur.execute("BEGIN")
                cur.execute(f"SET LOCAL lock_timeout = '{ms}ms'")
                cur.execute(f"SET LOCAL statement_timeout = '{ms}ms'")
            cur.execute(store._q(_INSERT), row)  # noqa: SLF001
        except Exception as exc:  # noqa: BLE001 - any refusal means "not writable"
            log.warning("readiness write probe failed: %s: %s", type(exc).__name__, exc)
            raise StoreUnavailable(
                f"the database refuses writes ({type(exc).__name__})", reason="store_not_writable"
            ) from exc
        finally:
            with suppress(Exception):  # no transaction, or the connection is gone
                cur.execute("ROLLBACK")
            if previous is not None:
                with suppress(Exception):
                    cur.execute(f"PRAGMA busy_timeout={previous}")
            cur.close()
