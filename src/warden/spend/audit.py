"""Spend events in the audit chain: one ``warden/spend.*`` entry per operation.

Each budget tree (org budget) has its own chain, a Warden-authored session
whose id is derived from the org budget id. Entries are appended inside the
spend operation's transaction, so an operation and its audit entry commit
together or not at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from warden.ledger.chain import chain_entry
from warden.ledger.ledger import Ledger
from warden.store.base import PendingAppend, SessionState

SPEND_NAMESPACE = uuid.UUID("6f0b4c52-8f0e-4f4e-9a1d-3f7c2b9e5a10")


def spend_session_id(root_budget_id: str) -> str:
    """The audit-chain session of a budget tree (deterministic per org budget)."""
    return str(uuid.uuid5(SPEND_NAMESPACE, f"warden:spend:{root_budget_id}"))


class AuditTx(Protocol):
    """The chain primitives a spend transaction offers."""

    def session_head(self, session_id: str) -> tuple[int, str | None] | None: ...

    def insert_session(self, state: SessionState) -> None: ...

    def append(self, item: PendingAppend) -> None: ...


class SpendAuditor:
    """Chains and signs spend events with the Guardian's :class:`Ledger` keys."""

    def __init__(self, ledger: Ledger, clock: Callable[[], datetime] | None = None) -> None:
        self.ledger = ledger
        self._clock = clock or (lambda: datetime.now(UTC))

    def __call__(
        self, tx: AuditTx, root_budget_id: str, event: str, step_id: str, detail: dict[str, Any]
    ) -> str:
        """Append ``warden/spend.<event>``; return the new entry hash."""
        sid = spend_session_id(root_budget_id)
        now = self._clock().isoformat()
        head = tx.session_head(sid)
        if head is None:
            state = SessionState(
                session_id=sid,
                agent_id=f"warden-spend:{root_budget_id}",
                key_id=self.ledger.key_id,
                created_at=now,
                negotiated={"kind": "spend_ledger", "root_budget": root_budget_id},
            )
            tx.insert_session(replace(state, signature=self.ledger.signed_session(state)))
            seq, previous = -1, None
        else:
            seq, previous = head
        entry = chain_entry(
            {
                "entry_id": str(uuid.uuid4()),
                "session_id": sid,
                "step_id": step_id,
                "step_type": f"warden/spend.{event}",
                "timestamp": now,
                "spend": detail,
            },
            previous,
        )
        tx.append(
            PendingAppend(
                session_id=sid,
                expected_seq=seq,
                entry=entry,
                response=None,
                head_signature=self.ledger.signed_head(sid, seq + 1, entry["entry_hash"]),
                replay=None,
            )
        )
        return str(entry["entry_hash"])
