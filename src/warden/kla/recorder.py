"""The action request wire's shared state and the one way it writes a record.

Every record Warden writes for an action request (seed 004: the policy decision, each
approval event, the audit event) is sealed with Warden's Ed25519 key, stored as a
``kla_records`` row and appended, in the same store transaction, to the execution's
Warden audit chain (``warden/kla.<event>``; docs/decisions.md, item 82). The submit,
outcome, approval-event and read paths all work through one :class:`Recorder`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from warden.approvals.desk import ApprovalDesk, DeskTx
from warden.approvals.tasks import Task
from warden.core.guardian import Guardian
from warden.core.pipeline import Pipeline, Recording
from warden.crypto.canonical import canonical_bytes
from warden.identity.api_keys import LiveCheckTx
from warden.kla.evidence import CHAIN_KIND, OWNED_SPACE, PROCESSED, Placement, Signer
from warden.kla.keys import KeyRegistry
from warden.kla.records import RecordKind, SealedRecord, seal
from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import WardenChain, chain_session_id
from warden.store.kla_sql import KlaRow, SqlKlaRecords


class KlaTx(DeskTx, Recording, LiveCheckTx, Protocol):
    """One store write transaction as the action request wire uses it."""

    @property
    def kla(self) -> SqlKlaRecords: ...

    def prefetch(self, *, heads: tuple[str, ...] = ()) -> None: ...


class KlaStore(Protocol):
    def transaction(self, *, unlocked_heads: bool = ...) -> AbstractContextManager[KlaTx]: ...

    def iter_records(self, session_id: str | None = None) -> Iterator[dict[str, Any]]: ...


def canonical_text(record: Any) -> str:
    """A record as stored: its RFC 8785 canonical text (whose SHA-256 is its digest)."""
    return canonical_bytes(record).decode("utf-8")


def new_id(prefix: str) -> str:
    """A new id of one of Warden's records: ``pd_``, ``ae_`` or ``au_`` + 32 random hex."""
    return f"{prefix}_{uuid.uuid4().hex}"


class Recorder:
    """Store, Guardian, desk, chain, Warden's key, the registry of trusted agent keys,
    and the clock (the desk's by default); seals, stores and chains records."""

    def __init__(
        self,
        store: KlaStore,
        guardian: Guardian,
        desk: ApprovalDesk,
        ledger: Ledger,
        signer: Signer,
        registry: KeyRegistry | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.guardian = guardian
        self.pipeline = Pipeline(guardian)
        self.desk = desk
        self.signer = signer
        self.registry = registry
        self.clock = clock
        self.chain = WardenChain(
            ledger,
            CHAIN_KIND,
            lambda: self.now(),
            negotiated=lambda name: (
                {"kind": "kla_execution", "execution_id": name} if name else {"kind": "kla_review"}
            ),
        )
        #: Principals' own chains of execution_ids another principal used first (930).
        self.owned_chain = WardenChain(
            ledger,
            CHAIN_KIND,
            lambda: self.now(),
            negotiated=lambda name: dict(
                zip(("principal", "execution_id"), json.loads(name), strict=True),
                kind="kla_execution",
            ),
            space=OWNED_SPACE,
        )

    def now(self) -> datetime:
        return self.clock() if self.clock is not None else self.desk.now()

    def seal(self, kind: RecordKind, record: dict[str, Any]) -> SealedRecord:
        """Check, digest and sign a record Warden writes, with the keys the setting
        ``evidence_signing_keys`` names (Ed25519 into ``signature``/``kid``, ML-DSA-65
        into ``signatures``; issue 21)."""
        signer = self.signer
        return seal(
            kind,
            record,
            private_key=signer.key if signer.ed25519_records else None,
            kid=signer.kid if signer.ed25519_records else None,
            pq_signer=signer.mldsa if signer.pq_records else None,
        )

    @staticmethod
    def row(sealed: SealedRecord, rid: str, execution: str, principal: str, stamp: str) -> KlaRow:
        """The stored row of one of Warden's sealed records (status ``processed``)."""
        return KlaRow(
            record_id=sealed.record[sealed.kind.id_field],
            kind=sealed.kind.value,
            action_request_id=rid,
            execution_id=execution,
            principal=principal,
            digest=sealed.digest,
            record=canonical_text(sealed.record),
            signature=sealed.signature,
            kid=sealed.kid,
            status=PROCESSED,
            created_at=stamp,
            signatures=sealed.signatures_json(),
        )

    def append(
        self,
        tx: KlaTx,
        row: KlaRow,
        value: Any,
        *,
        event: str,
        at: Placement,
        decided: dict[str, Any] | None = None,
    ) -> None:
        """Append ``warden/kla.<event>`` carrying the record to its execution's chain
        ``at`` (:class:`~warden.kla.evidence.Placing`, read before the operation wrote any
        record; records held for review without a usable execution_id: the review chain
        ``""``).
        ``decided``: what a policy decision's entry records for ``warden whatif``
        (:func:`warden.kla.asks.decided_record`), beside the signed record."""
        detail: dict[str, Any] = {
            "record_id": row.record_id,
            "kind": row.kind,
            "digest": row.digest,
            "status": row.status,
            "principal": row.principal,
            "record": value,
        }
        if row.signature is not None:
            detail["signature"] = row.signature
            detail["kid"] = row.kid
        if row.signatures is not None:
            detail["signatures"] = json.loads(row.signatures)
        if decided is not None:
            detail["decided"] = decided
        if (at.principal, at.execution_id) != (row.principal, row.execution_id):
            raise AssertionError(f"record {row.record_id} is not of the execution {at.name}")
        chain = self.owned_chain if at.owned else self.chain
        chain.append(tx, at.name, event, f"{event}:{row.record_id}", detail)

    def chain_read(self, tx: KlaTx, execution_id: str) -> None:
        """Read the head of ``execution_id``'s plain chain with ``tx``'s ``BEGIN``, without
        a lock, when ``tx`` may chain on it so (decision 800; a principal's own chain,
        decision 930, is read when appended to)."""
        tx.prefetch(heads=(chain_session_id(self.chain.kind, execution_id),))

    @staticmethod
    def task(tx: KlaTx, task_id: Any) -> Task | None:
        """The approval task a decision names, if it names one."""
        return tx.tasks.get(task_id) if isinstance(task_id, str) else None
