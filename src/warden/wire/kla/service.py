"""What the action request routes do (seed 004: request → decision → approval → audit).

:class:`KlaService` is the one object the routes (:mod:`.routes`) and the runtime hold;
each of its operations is a path in its own module, over one shared
:class:`~warden.kla.recorder.Recorder` (store, Guardian, desk, audit chain, Warden's key,
the trusted agent keys, the clock):

- :mod:`.submit`: ``POST /v1/action-requests`` validates an AI agent action request
  v1 record, digests it, checks a detached signature, asks the Guardian (policy method
  ``kla/action``), writes the signed policy decision, files an approval task on the
  desk for ``require_approval`` and chains the request and the decision, all in one
  database transaction (a version Warden does not support is held for review, ``422``);
- :mod:`warden.kla.approval_events`: an approver's decision on the desk writes a signed
  approval event on the same chain, inside the desk's transaction
  (:meth:`on_desk_transition`);
- :mod:`.outcome`: the agent's outcome report writes the audit event, refused (``409
  record:not_authorized``) when it names a tool call the decision did not allow: after
  ``block``, or after ``require_approval`` without an approval it consumes then (an
  approval authorizes one step only);
- :mod:`.reads`: the request and its trail, one record, an execution's evidence bundle
  and Warden's public keys, as far as the caller may read them.

What they answer (:class:`.Answer`, the ``record:*`` refusals) is :mod:`.answers`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from warden.approvals.desk import ApprovalDesk, Approver, DeskTx
from warden.approvals.tasks import Event, Task
from warden.core.guardian import Guardian
from warden.identity.api_keys import Identity
from warden.kla import approval_events
from warden.kla.evidence import Evidence, Signer
from warden.kla.keys import KeyRegistry
from warden.kla.recorder import KlaStore, Recorder
from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import WardenChain
from warden.store.kla_sql import RecordChanged
from warden.wire.kla import outcome, reads, submit
from warden.wire.kla.answers import Answer
from warden.wire.kla.models import OutcomeRequest
from warden.wire.spend.render import Refusal

_T = TypeVar("_T")


def _intact(call: Callable[[], _T]) -> _T:
    """Run a route; a stored record that no longer hashes to its digest (edited in the
    database, :meth:`~warden.store.kla_sql.KlaRow.value`) is ``500
    evidence:integrity_failed``, never served or decided on (decision 911)."""
    try:
        return call()
    except RecordChanged as exc:
        raise Refusal("evidence:integrity_failed", 500, exc.message) from exc


class KlaService:
    """The routes' shared state: store, Guardian, desk, chain, Warden's key, the registry
    of trusted agent keys, and the clock (the desk's by default)."""

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
        self._rec = Recorder(store, guardian, desk, ledger, signer, registry, clock)

    @property
    def store(self) -> KlaStore:
        return self._rec.store

    @property
    def guardian(self) -> Guardian:
        return self._rec.guardian

    @property
    def desk(self) -> ApprovalDesk:
        return self._rec.desk

    @property
    def signer(self) -> Signer:
        return self._rec.signer

    @property
    def registry(self) -> KeyRegistry | None:
        return self._rec.registry

    @property
    def chain(self) -> WardenChain:
        return self._rec.chain

    def now(self) -> datetime:
        return self._rec.now()

    def submit(self, body: Any, signature: str | None, kid: str | None, who: Identity) -> Answer:
        """``POST /v1/action-requests`` (the steps in :mod:`.submit`)."""
        return _intact(lambda: submit.submit(self._rec, body, signature, kid, who))

    def on_desk_transition(
        self, tx: DeskTx, task: Task, event: Event, by: Approver | None, reason: str
    ) -> None:
        """A desk listener for :attr:`TaskKind.ACTION_REQUEST`: an approver's approve, deny
        or re-route writes a signed approval event, chained on the execution's chain, in
        the desk's transaction (votes short of N-of-M, expiry and consumption write none)."""
        approval_events.on_desk_transition(self._rec, tx, task, event, by, reason)

    def outcome(self, rid: str, body: OutcomeRequest, who: Identity) -> Answer:
        """``POST /v1/action-requests/{id}/outcome``: the audit event (:mod:`.outcome`)."""
        return _intact(lambda: outcome.outcome(self._rec, rid, body, who))

    def get_request(self, rid: str, who: Identity, principal: str | None = None) -> Answer:
        """``GET /v1/action-requests/{id}``: the request and every record after it."""
        return _intact(lambda: reads.get_request(self._rec, rid, who, principal))

    def get_record(self, record_id: str, who: Identity, principal: str | None = None) -> Answer:
        """``GET /v1/kla-records/{record_id}``: one record by id, any kind."""
        return _intact(lambda: reads.get_record(self._rec, record_id, who, principal))

    def evidence_of(
        self, execution_id: str, who: Identity, principal: str | None = None
    ) -> Evidence:
        """The evidence of one execution, as far as ``who`` may read it. A records table
        that disagrees with the audit chain is ``500 evidence:integrity_failed``: nothing
        the chain does not vouch for is signed."""
        return reads.evidence_of(self._rec, execution_id, who, principal)

    def evidence(self, execution_id: str, who: Identity, principal: str | None = None) -> Answer:
        """``GET /v1/executions/{execution_id}/evidence``: the evidence bundle."""
        return reads.evidence(self._rec, execution_id, who, principal)

    def keys(self) -> Answer:
        """``GET /v1/keys``: Warden's public signing keys (JWKS)."""
        return reads.keys(self._rec)
