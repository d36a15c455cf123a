"""Warden-authored audit chains: one ``warden/<kind>.<event>`` entry per operation.

Some events have no Observed Agent session to live in: a budget tree's spend
operations, an approval task's transitions. Each such stream is a session that
Warden itself opens, whose id is derived from its name (UUIDv5), chained and
signed with the Guardian's :class:`~warden.ledger.ledger.Ledger` keys exactly like
an agent's session, so ``warden verify`` covers it. Entries are appended inside
the caller's transaction: an operation and its audit entry commit together or
not at all.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from warden.errors import StoreUnavailable, UnlockedHeadMoved
from warden.ledger.chain import chain_entry
from warden.ledger.ledger import Ledger
from warden.store.base import PendingAppend, SessionState

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The UUIDv5 namespace of Warden-authored sessions (first used by the spend ledger).
WARDEN_NAMESPACE = uuid.UUID("6f0b4c52-8f0e-4f4e-9a1d-3f7c2b9e5a10")


def chain_session_id(kind: str, name: str) -> str:
    """The session id of Warden's ``kind`` chain called ``name`` (deterministic)."""
    return str(uuid.uuid5(WARDEN_NAMESPACE, f"warden:{kind}:{name}"))


def chained_attempts(attempt: Callable[[bool], _T]) -> _T:
    """Run an operation that chains Warden entries, at most twice (decision 800).

    ``attempt(True)`` runs it in a transaction that may chain on heads read without a
    lock (sent with its ``BEGIN``, locked only by the append in its last round trip);
    if one of them moved meanwhile, that transaction rolled back with
    :class:`~warden.errors.UnlockedHeadMoved` and ``attempt(False)`` runs the operation
    again from its start, in a new transaction that locks every head it chains on (it
    cannot raise that error, so there is no third attempt). ``attempt`` must keep
    nothing in memory from a transaction that did not commit."""
    try:
        return attempt(True)
    except UnlockedHeadMoved as exc:
        log.info("a chain head moved under an unlocked read; running again locked: %s", exc)
        return attempt(False)


class AuditTx(Protocol):
    """The chain primitives a write transaction offers."""

    def session_head(self, session_id: str) -> tuple[int, str | None] | None: ...

    def insert_session(self, state: SessionState) -> bool: ...

    def append(self, item: PendingAppend) -> None: ...


class WardenChain:
    """Appends ``warden/<kind>.<event>`` entries to Warden-authored sessions."""

    def __init__(
        self,
        ledger: Ledger,
        kind: str,
        clock: Callable[[], datetime] | None = None,
        negotiated: Callable[[str], dict[str, Any]] | None = None,
        space: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.kind = kind
        #: What the chains' session ids are derived under (``kind`` unless given): two
        #: families of one kind's chains whose names cannot collide.
        self.space = space or kind
        self._clock = clock or (lambda: datetime.now(UTC))
        self._negotiated = negotiated or (lambda name: {"kind": f"{kind}_ledger", "name": name})

    def append(
        self, tx: AuditTx, name: str, event: str, step_id: str, detail: dict[str, Any]
    ) -> dict[str, Any]:
        """Append ``warden/<kind>.<event>`` carrying ``detail`` under the key ``kind`` to
        the chain ``name``; return the chained entry (``entry_hash``, ``seq`` …)."""
        sid = chain_session_id(self.space, name)
        now = self._clock().isoformat()
        head = tx.session_head(sid)
        if head is None:
            state = SessionState(
                session_id=sid,
                agent_id=f"warden-{self.kind}:{name}",
                key_id=self.ledger.key_id,
                created_at=now,
                negotiated=self._negotiated(name),
            )
            if tx.insert_session(replace(state, signature=self.ledger.signed_session(state))):
                head = (-1, None)
            else:  # a replica created the chain a moment ago: append after its head
                head = tx.session_head(sid)
                if head is None:
                    raise StoreUnavailable(f"chain {sid} vanished while it was being created")
        seq, previous = head
        entry = chain_entry(
            {
                "entry_id": str(uuid.uuid4()),
                "session_id": sid,
                "step_id": step_id,
                "step_type": f"warden/{self.kind}.{event}",
                "timestamp": now,
                self.kind: detail,
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
        return entry
