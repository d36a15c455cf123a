"""Warden's own lifecycle in the audit log: server starts and bundle loads (issue 17).

Each is a ``warden/warden.<event>`` entry on the Warden-authored chain ``system``
(:class:`~warden.ledger.warden_chain.WardenChain`), so it is a leaf of the
transparency log like every other audit event: a start that loaded a different policy
bundle is on the record, and a verifier sees every restart.
"""

from __future__ import annotations

import uuid
from typing import Any

from warden import __version__
from warden.core.types import BundleRef
from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import WardenChain
from warden.store.sql import SqlStore

SYSTEM_CHAIN = "system"


def record_start(store: SqlStore, ledger: Ledger, bundle: BundleRef, *, replica: str) -> None:
    """Append ``warden.start`` and ``warden.bundle_load`` in one transaction."""
    chain = WardenChain(ledger, "warden")
    bundle_detail: dict[str, Any] = {
        "id": bundle.id,
        "version": bundle.version,
        "digest": bundle.digest,
    }
    with store.transaction() as tx:
        chain.append(
            tx,
            SYSTEM_CHAIN,
            "start",
            f"start:{uuid.uuid4()}",
            {"replica": replica, "version": __version__},
        )
        chain.append(tx, SYSTEM_CHAIN, "bundle_load", f"bundle:{uuid.uuid4()}", bundle_detail)
