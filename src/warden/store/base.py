"""The Store protocol: what the Guardian needs from persistence, and its contract.

Contract (every implementation, tested by tests/store/test_store_contract.py):

- Every method is atomic; a method that raises has changed nothing.
- ``create_session`` stores the session with its signature (``state.signature``,
  else the one ``session_signer`` makes, else none).
- ``append`` commits the entry, the new signed head, the step's replay keys and
  the closed flag in one durable transaction, and only if the session head is
  still ``expected_seq`` (else :class:`~warden.errors.HeadMoved`). A duplicate
  replay key, or a second entry for the same request id (``step_id``) in the
  session, raises :class:`~warden.errors.ReplayDetected`; neither writes.
- ``record_replay`` persists replay keys alone (a refused step is still seen).
- ``append_many`` is ``append`` for a batch: one commit, per-item outcomes.
- ``iter_records`` yields only what the database holds faithfully: a stored row
  that is not strict JSON, a denormalized column that disagrees with its entry,
  or entries belonging to no session raise :class:`~warden.errors.IntegrityError`;
  a database it cannot read raises :class:`~warden.errors.StoreUnavailable`.
- Thread-safe: callers may use one store from several threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ReplayKeys:
    """The replay identifiers of one request (ACS §10.3): request_id and optional nonce."""

    request_id: str
    nonce: str | None = None


@dataclass(frozen=True)
class SessionState:
    """What the Guardian knows about a session between requests.

    ``negotiated`` holds the ServerHello and the bound methods; ``head_seq`` is
    -1 before the first entry. ``signature`` is the HMAC of the session record
    (:meth:`warden.ledger.ledger.Ledger.signed_session`), made once at creation;
    ``None`` when the caller did not sign it.
    """

    session_id: str
    agent_id: str
    key_id: str
    created_at: str
    negotiated: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    head_seq: int = -1
    head_hash: str | None = None
    signature: dict[str, Any] | None = None


#: Signs a new session's record (see ``Store.session_signer``).
SessionSigner = Callable[[SessionState], dict[str, Any]]


@dataclass(frozen=True)
class TaskUnchanged:
    """A read guard of an append: approval task ``task_id`` still has ``updated_at``
    (every change of a task moves it). Checked inside the append's transaction; a
    mismatch fails the append with :class:`~warden.errors.StaleRead`, writing nothing.

    ``scope`` and ``action_hash`` (the action the task is bound to), when given, let the
    PostgreSQL append read, in the same round trip, what the desk would read next when
    the guard fails: the newest task bound to that action, its record if approved
    (``StaleRead.found``; decision 820)."""

    task_id: str
    updated_at: str
    scope: str | None = None
    action_hash: str | None = None


@dataclass(frozen=True)
class NoLiveTask:
    """A read guard of an append that files a task: no task bound to ``action_hash`` in
    ``scope`` that the desk would answer from (the newest one, if any, is consumed or
    canceled). Checked in the append's transaction after the desk chain is locked; a
    mismatch fails the append with :class:`~warden.errors.StaleRead`."""

    scope: str
    action_hash: str


class FoldedWrite(Protocol):
    """Writes a gate hands to the step's append, to commit in its transaction (issue 16:
    "a gate that files a task runs inside that transaction"): the approval desk's filing
    of a task, or its consumption of a grant (the task's row, its desk-chain entry, its
    webhook outbox rows) on PostgreSQL.

    ``locks``: the approval tasks :meth:`write` changes (locked first, in the order the
    desk's own transaction takes them: its task, then its chain); ``chains``: the
    Warden-authored sessions :meth:`write` appends to (their heads are locked and read
    next); ``absent``: what must still be true for the write to be right.
    :meth:`write` is called at most once per attempt with a transaction that offers
    :class:`~warden.ledger.warden_chain.AuditTx` plus ``tasks`` and ``outbox``; it may
    be called again (after a rolled-back attempt). :meth:`committed` is called
    once, after the COMMIT that carried it."""

    @property
    def locks(self) -> tuple[str, ...]: ...

    @property
    def chains(self) -> tuple[str, ...]: ...

    @property
    def absent(self) -> tuple[NoLiveTask, ...]: ...

    def write(self, tx: Any) -> None: ...

    def committed(self) -> None: ...


@dataclass(frozen=True)
class PendingAppend:
    """One chained entry ready to commit: the arguments of :meth:`Store.append`.

    ``response`` is the signed wire response that publishes ``entry_hash``; it is
    stored beside the entry so ``warden verify`` can re-check its signature.
    ``request`` is the canonical JSON of the request's params, exactly the bytes
    the entry's ``request_hash`` covers (optional; stored and exported beside it).
    """

    session_id: str
    expected_seq: int
    entry: dict[str, Any]
    response: dict[str, Any] | None
    head_signature: dict[str, Any]
    replay: ReplayKeys | None
    close: bool = False
    request: str | None = None
    #: The registered agent key that signed the request: the append commits only while
    #: it is unrevoked (checked in its transaction; :class:`~warden.errors.KeyRevoked`).
    agent_key: str | None = None
    #: Given the entry's transparency-log leaf index (known only inside the append's
    #: transaction), the final signed response that carries it; it replaces ``response``
    #: in the stored row. Called at most once per attempt, inside the transaction, so a
    #: response never names an index its entry did not get (issue 17 item 3).
    indexed: Callable[[int], dict[str, Any]] | None = None
    #: Rows the decision read outside this transaction and relies on: checked in it
    #: (issue 16: the approval lookup needs no transaction of its own).
    guards: tuple[TaskUnchanged, ...] = ()
    #: A gate's writes that commit with this entry or not at all (:class:`FoldedWrite`).
    folded: FoldedWrite | None = None


class Store(Protocol):
    """Persistence for sessions, replay keys and audit entries."""

    #: Signs a session created without ``state.signature`` (the Ledger registers one).
    session_signer: SessionSigner | None

    def create_session(
        self, state: SessionState, replay: ReplayKeys, *, agent_key: str | None = None
    ) -> None:
        """Insert a new session (with its signature) and its handshake's replay keys.

        Raises ``SessionRefused(reason=renegotiation_not_supported)`` if it exists,
        ``ReplayDetected`` on a duplicate key, ``KeyRevoked`` if ``agent_key`` (the
        registered agent key that signed the handshake) is revoked by then.
        """

    def load_session(self, session_id: str, *, fresh: bool = False) -> SessionState | None:
        """The session's state, or None; ``fresh`` bypasses any cache (after HeadMoved)."""

    def seen(self, session_id: str, replay: ReplayKeys) -> bool:
        """True when either replay key was already recorded for the session."""

    def record_replay(self, session_id: str, replay: ReplayKeys) -> None:
        """Persist replay keys; raises ``ReplayDetected`` on a duplicate."""

    def append(
        self,
        session_id: str,
        *,
        expected_seq: int,
        entry: dict[str, Any],
        response: dict[str, Any] | None,
        head_signature: dict[str, Any],
        replay: ReplayKeys | None,
        close: bool = False,
        request: str | None = None,
    ) -> None:
        """Append one chained entry at ``expected_seq + 1`` (see module contract)."""

    def append_many(self, items: list[PendingAppend]) -> list[Exception | None]:
        """Commit several appends in one durable transaction (group commit).

        Each item succeeds or fails on its own (``HeadMoved``, ``ReplayDetected``)
        exactly as :meth:`append` would, in list order; the result holds ``None``
        or the item's error. A store failure fails every item.
        """

    def iter_records(self, session_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield export records (session, entries, signed head) session by session
        (shapes: :mod:`warden.ledger.records`).

        Raises ``IntegrityError`` for what cannot be exported faithfully (see the
        module contract) and ``StoreUnavailable`` if the database cannot be read.
        """

    def ping(self) -> None:
        """One round trip to the database; ``StoreUnavailable`` if it fails (readiness)."""

    def probe_write(self) -> None:
        """One write that is rolled back, with a short lock wait; ``StoreUnavailable``
        (reason ``store_not_writable``) if the database refuses it (readiness)."""

    def counts(self) -> dict[str, int]:
        """Row counts per table (for tests)."""

    def close(self) -> None:
        """Release connections."""
