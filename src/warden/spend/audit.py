"""Spend events in the audit chain: one ``warden/spend.*`` entry per operation.

Each budget tree (org budget) has its own chain, a Warden-authored session
(:mod:`warden.ledger.warden_chain`) whose id is derived from the org budget id.
Entries are appended inside the spend operation's transaction, so an operation
and its audit entry commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import AuditTx, WardenChain, chain_session_id

__all__ = ["AuditTx", "SpendAuditor", "spend_session_id"]


def spend_session_id(root_budget_id: str) -> str:
    """The audit-chain session of a budget tree (deterministic per org budget)."""
    return chain_session_id("spend", root_budget_id)


class SpendAuditor:
    """Chains and signs spend events with the Guardian's :class:`Ledger` keys."""

    def __init__(self, ledger: Ledger, clock: Callable[[], datetime] | None = None) -> None:
        self.ledger = ledger
        self._chain = WardenChain(
            ledger,
            "spend",
            clock,
            negotiated=lambda root: {"kind": "spend_ledger", "root_budget": root},
        )

    def __call__(
        self, tx: AuditTx, root_budget_id: str, event: str, step_id: str, detail: dict[str, Any]
    ) -> str:
        """Append ``warden/spend.<event>``; return the new entry hash."""
        return str(self._chain.append(tx, root_budget_id, event, step_id, detail)["entry_hash"])
