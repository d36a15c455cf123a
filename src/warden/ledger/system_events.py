"""Warden's own lifecycle in the transparency log: server starts and bundle loads.

Each is a ``log_events`` leaf (issue 17), written in one transaction at start: a start
that loaded a different policy bundle is on the record, and a verifier sees every
restart. They are no chain entries: no agent session holds them, and the per-session
views (``warden verify`` 's session counts, exports per session) stay as they were.
"""

from __future__ import annotations

from warden import __version__
from warden.core.types import BundleRef
from warden.store.sql import SqlStore


def record_start(store: SqlStore, bundle: BundleRef, *, replica: str) -> None:
    """Append ``warden.start`` and ``warden.bundle_load`` leaves in one transaction."""
    with store.transaction() as tx:
        tx.log_event("warden.start", {"replica": replica, "version": __version__})
        tx.log_event(
            "warden.bundle_load",
            {
                "replica": replica,
                "id": bundle.id,
                "version": bundle.version,
                "digest": bundle.digest,
            },
        )
