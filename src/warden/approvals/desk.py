"""The approval desk: files, decides, expires and consumes approval tasks.

Every wire reaches it the same way. When the Guardian's verdict is ``ask`` (or a
``defer`` resolved by a human), the wire calls :meth:`ApprovalDesk.resolve` with
the exact action; the desk answers, inside the caller's transaction:

- ``granted``: an approved task bound to this action in this scope exists; it is
  consumed now (single use) and the step goes ahead once;
- ``pending``: a task awaits a human (filed now, or the one already filed);
- ``denied`` / ``expired``: a human said no, or nobody answered in time and the
  rule's timeout disposition is deny; reported once, after which the same action
  asks again;
- ``invalid``: the step cited a task (``approval_task_id``) that is not an unused
  grant for this very action in this scope (``grant_invalid``).

Approvers act through :meth:`approve`, :meth:`deny` and :meth:`reroute`
(maker-checker: neither the requesting agent nor its principal may vote; N-of-M
needs N distinct approvers whose keys are not revoked when the deciding vote is
counted, one deny vetoes; re-routing clears the votes). Each transition is one entry
``warden/approval.<event>`` on the desk's own audit chain (a Warden-authored
session, :mod:`warden.ledger.warden_chain`), committed with the task change and
the webhook outbox rows, so nothing is reported that is not durable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from warden.approvals.binding import action_hash
from warden.approvals.errors import DeskError as DeskError
from warden.approvals.errors import NotPermitted as NotPermitted
from warden.approvals.errors import TaskConflict as TaskConflict
from warden.approvals.errors import TaskNotFound as TaskNotFound
from warden.approvals.tasks import (
    ApprovalState,
    Event,
    Requester,
    Task,
    TaskKind,
    TaskStore,
    Vote,
)
from warden.errors import StaleRead
from warden.ledger.ledger import Ledger
from warden.ledger.warden_chain import AuditTx, WardenChain, chain_session_id
from warden.reasons import NO_REASON, says_something
from warden.store.base import FoldedWrite, NoLiveTask, TaskUnchanged

DESK_CHAIN = "desk"
MAX_REASON_CHARS = 2000


def desk_session_id() -> str:
    """The audit-chain session holding every approval transition."""
    return chain_session_id("approval", DESK_CHAIN)


class Approver(Protocol):
    """An authenticated caller acting on the desk (an API key's identity)."""

    @property
    def key_id(self) -> str: ...

    @property
    def principal(self) -> str: ...

    def in_group(self, group: str) -> bool: ...


class DeskTx(AuditTx, Protocol):
    """What one desk transaction needs: tasks, the chain, and the webhook outbox."""

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def outbox(self) -> Any: ...


class Notifier(Protocol):
    def enqueue(self, outbox: Any, task_view: dict[str, Any], event: str, now: datetime) -> int: ...


#: A desk listener (:attr:`ApprovalDesk.listeners`): ``(tx, task, event, by, reason)``.
Listener = Callable[[DeskTx, Task, Event, Approver | None, str], None]


class Outcome(StrEnum):
    GRANTED = "granted"
    PENDING = "pending"
    DENIED = "denied"
    EXPIRED = "expired"
    INVALID = "invalid"


#: The reason code each outcome puts on the step's verdict.
REASON_CODES = {
    Outcome.GRANTED: "approval_granted",
    Outcome.PENDING: "approval_pending",
    Outcome.DENIED: "approval_denied",
    Outcome.EXPIRED: "approval_expired",
    Outcome.INVALID: "grant_invalid",
}


@dataclass(frozen=True)
class AskRequest:
    """A step that needs a human. ``action`` is what the grant is bound to (hashed);
    ``timeout_s`` is how long the task stays open (and, once approved, how long the
    grant stays usable); ``scope`` is where a grant is valid (the ACS session id,
    ``spend:<principal>`` …)."""

    kind: TaskKind
    wire: str
    scope: str
    action: dict[str, Any]
    requester: Requester
    approver_group: str
    question: str
    timeout_s: float
    timeout_disposition: str = "deny"
    approvals_required: int = 1
    correlation: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    cited_task_id: str | None = None
    #: What the task stores and shows instead of ``action`` when they differ (values a
    #: modify rule redacts replaced, :mod:`warden.approvals.redaction`); the grant is
    #: still bound to ``action_hash(action)``.
    shown_action: dict[str, Any] | None = None


@dataclass(frozen=True)
class Resolution:
    outcome: Outcome
    task: Task | None
    text: str
    #: Granted by the rule's ``timeout_disposition: allow``, not by an approver.
    timed_out: bool = False
    #: A pending answer read outside a write transaction: the row the append must find
    #: unchanged in its own transaction (:attr:`PendingAppend.guards`).
    guard: TaskUnchanged | None = None
    #: A task filed with the step's entry, in its transaction (:meth:`ApprovalDesk.peek`
    #: with ``fold_filing``): nothing is written until that append commits.
    folded: FoldedWrite | None = None
    #: A grant read, not yet consumed (:meth:`ApprovalDesk.peek` with ``defer_grant``):
    #: the step consumes it with :meth:`ApprovalDesk.resolve` once every later gate
    #: agreed, so a step a later gate refuses never consumes it (decision 975).
    deferred: bool = False

    @property
    def reason_code(self) -> str:
        return "approval_timeout_allow" if self.timed_out else REASON_CODES[self.outcome]


def with_reasoning(reasoning: str, text: str) -> str:
    """The policy's ``reasoning`` then the desk's ``text``, as two sentences: a full stop
    is put after a reasoning that ends without one (a bundle's ``reasoning: deleting
    needs a human`` read "… needs a human Awaiting approval …"; decision 904)."""
    reasoning = reasoning.strip()
    if not reasoning:
        return text.strip()
    if not reasoning.endswith((".", "!", "?", ":", ";")):
        reasoning += "."
    return f"{reasoning} {text.strip()}".strip()


def _clean_reason(reason: str) -> str:
    text = (reason or "").strip()
    if len(text) > MAX_REASON_CHARS:
        raise DeskError(f"the reason is longer than {MAX_REASON_CHARS} characters")
    return text


def _shown_void(tx: DeskTx, tasks: list[Task]) -> list[Task]:
    """``tasks`` with the votes of keys revoked since marked void (pending tasks only:
    a decided task keeps its votes as they were counted). Nothing is written."""
    open_ids = [t.id for t in tasks if not t.state.decided and t.votes]
    if not open_ids:
        return tasks
    revoked = tx.tasks.revoked_vote_keys(open_ids)
    return [t.with_void_keys(revoked) for t in tasks] if revoked else tasks


def _newly_void(before: Task, after: Task) -> dict[str, Any]:
    """``{"votes_void": [{principal, key_id}]}`` for votes void in ``after`` only."""
    was = {(v.principal, v.key_id) for v in before.votes if v.void is not None}
    now = [
        {"principal": v.principal, "key_id": v.key_id}
        for v in after.votes
        if v.void is not None and (v.principal, v.key_id) not in was
    ]
    return {"votes_void": now} if now else {}


#: How many parsed pending tasks :meth:`ApprovalDesk.peek` keeps (cleared when full).
_PENDING_CACHE = 4096


class ApprovalDesk:
    """Approval tasks over one store; every change chained and notified. Thread-safe
    (each operation is one database transaction)."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[DeskTx]],
        ledger: Ledger,
        *,
        notifier: Notifier | None = None,
        desk_url: str | None = None,
        clock: Callable[[], datetime] | None = None,
        reading: Callable[[], AbstractContextManager[Any]] | None = None,
        fold_filing: bool = False,
    ) -> None:
        self._transaction = transaction
        #: File a new task in the step's append transaction instead of the desk's own
        #: (PostgreSQL: the ask that files costs the append's two round trips only;
        #: decision 640). Off on SQLite, whose one writer gains nothing from it.
        self.fold_filing = fold_filing
        #: A read-only view with ``tasks`` (``SqlStore.reading``) for :meth:`peek`.
        self._reading = reading
        #: Pending tasks as parsed, by id: ``(updated_at as stored, task)``.
        self._pending: dict[str, tuple[str, Task]] = {}
        #: (scope, action hash) → the pending task last read for it, with its updated_at.
        self._pending_by_action: dict[tuple[str, str], tuple[str, Task]] = {}
        self._chain = WardenChain(
            ledger, "approval", clock, negotiated=lambda name: {"kind": "approval_desk"}
        )
        self.notifier = notifier
        self.desk_url = desk_url.rstrip("/") if desk_url else None
        #: The desk's clock (aware UTC); settable, so tests can move time.
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        #: What an approval does by itself, per kind (a budget increase raises the cap);
        #: kinds without one wait for a resubmission to consume the grant.
        self.effects: dict[TaskKind, Callable[[DeskTx, Task], dict[str, Any]]] = {}
        #: Called for every transition of a task of the kind, inside the desk's
        #: transaction after the task is written: ``(tx, task, event, by, reason)``
        #: (``by`` None when no approver acted). Raising rolls the transition back.
        self.listeners: dict[TaskKind, Listener] = {}

    def now(self) -> datetime:
        return self.clock()

    def task_url(self, task_id: str) -> str | None:
        return f"{self.desk_url}/desk/tasks/{task_id}" if self.desk_url else None

    @contextmanager
    def transaction(self) -> Iterator[DeskTx]:
        with self._transaction() as tx:
            yield tx

    # -- the wires' side ----------------------------------------------------------------

    def remembered(self, scope: str, action: dict[str, Any]) -> Resolution | None:
        """:meth:`peek`'s answer when the desk's memory has it (a pending task without
        votes for this action, not due to expire), else None: no read, and the caller
        need not build the :class:`AskRequest` first. Never for a step citing a task."""
        if self._reading is None:
            return None
        return self._from_memory((scope, action_hash(action)))

    def _from_memory(self, key: tuple[str, str]) -> Resolution | None:
        hit = self._pending_by_action.get(key)
        # Only a pending task is answered from memory here; an approved one the desk
        # remembers (``approve``) is consumed through :meth:`peek`.
        if hit is None or hit[1].state is not ApprovalState.PENDING:
            return None
        if hit[1].expires_at <= self.now():
            return None
        task = hit[1]
        return Resolution(
            Outcome.PENDING,
            task,
            self._pending_text(task),
            guard=TaskUnchanged(task.id, hit[0], *key),
        )

    def peek(
        self,
        ask: AskRequest,
        *,
        fresh: bool = False,
        consumer: dict[str, Any] | None = None,
        newest: Any = StaleRead.MISSING,
        defer_grant: bool = False,
    ) -> Resolution | None:
        """The answer for ``ask`` when it needs no write of its own: the latest task for
        its action is pending and not yet due to expire, and no task is cited. None
        otherwise (or without a read-only view): call :meth:`resolve` in a transaction.

        With ``fold_filing`` the writes an answer needs ride on the step's append
        (:attr:`Resolution.folded`): a task nothing is known of is filed with it, and an
        approved task is consumed with it (given ``consumer``, the step that consumes
        it, as for :meth:`resolve`; decision 645).

        An ask resubmitted while its task waits is the common case on the decision path;
        answering it from a read spares a second write transaction (issue 16). The
        answer carries a guard (the task's ``updated_at``) that the step's append checks
        in its own transaction, so a task decided in between fails the append with
        ``StaleRead`` and the step is decided again with ``fresh=True``. A task without
        votes, once read, is answered from memory (the guard still checks it): no read
        at all on the common path. ``fresh`` drops that memory for the ask first.

        ``newest`` (with ``fresh``): the newest task bound to the action as the failed
        append read it (``StaleRead.found``, decision 820), in place of the desk's own
        read of it; a pending task is still read again (its record and votes).

        ``defer_grant`` (given ``consumer``): an approved task whose consumption cannot be
        folded is answered as a :attr:`Resolution.deferred` grant, nothing written; the
        caller consumes it with :meth:`resolve` when it knows the step is allowed.
        """
        if self._reading is None or ask.cited_task_id is not None:
            return None
        key = (ask.scope, action_hash(ask.action))
        if fresh:
            self._pending_by_action.pop(key, None)
        else:
            hit = self._pending_by_action.get(key)
            if hit is not None and hit[1].state is ApprovalState.APPROVED:
                # Approved on this replica (:meth:`approve` remembers it): consumed with
                # the step's entry; the guard finds it unchanged or the step is decided
                # again from the database.
                granted = self._folded_grant(ask, hit[1], hit[0], key, consumer)
                if granted is None:
                    # Not foldable (it lapsed, or no step is named): the desk's own path.
                    self._pending_by_action.pop(key, None)
                return granted
            known = self._from_memory(key)
            if known is not None:
                return known
            if self.fold_filing and ask.kind not in self.listeners:
                # Nothing known of this action: file its task with the step's entry. The
                # append checks that no task the desk would answer from exists (after
                # locking the desk chain, which every filing locks); if one does, the
                # step is decided again with ``fresh`` (decision 640).
                task = self._new_task(ask, key[1], self.now())
                return Resolution(
                    Outcome.PENDING,
                    task,
                    self._pending_text(task),
                    folded=_Filing(self, task, key),
                )
        if fresh and newest is not StaleRead.MISSING:
            head = newest[0] if newest is not None else None
            if head is None or head[1] != ApprovalState.PENDING.value:
                # Read in the failed append's round trip: approved (consumed with the
                # step's entry), or nothing the desk answers without its transaction.
                return self._found_grant(ask, newest, key, consumer, defer_grant)
        with self._reading() as view:
            found = view.tasks.latest_state_or_grant(*key)
            head = found[0] if found is not None else None
            if head is not None and head[1] == ApprovalState.APPROVED.value:
                return self._found_grant(ask, found, key, consumer, defer_grant)
            if head is None or head[1] != ApprovalState.PENDING.value:
                return None
            task_id, _, updated_at, _ = head
            cached = self._pending.get(task_id)
            if cached is not None and cached[0] == updated_at:
                latest: Task | None = cached[1]
            else:
                # Parsed once per version of the task (every change moves updated_at).
                latest = view.tasks.get(task_id)
                if latest is None or latest.state is not ApprovalState.PENDING:
                    return None
                if len(self._pending) >= _PENDING_CACHE:
                    self._pending.clear()
                self._pending[task_id] = (updated_at, latest)
            assert latest is not None
            if latest.expires_at <= self.now():
                return None
            if not latest.votes:
                # Votes are shown void by key revocations, which do not move the task's
                # updated_at: only a task without votes may be answered from memory.
                if len(self._pending_by_action) >= _PENDING_CACHE:
                    self._pending_by_action.clear()
                self._pending_by_action[key] = (updated_at, latest)
            latest = _shown_void(view, [latest])[0]
        return Resolution(
            Outcome.PENDING,
            latest,
            self._pending_text(latest),
            guard=TaskUnchanged(task_id, updated_at, *key),
        )

    def _found_grant(
        self,
        ask: AskRequest,
        found: Any,
        key: tuple[str, str],
        consumer: dict[str, Any] | None,
        defer: bool = False,
    ) -> Resolution | None:
        """The grant folded into the step's append when ``found`` (the newest task for
        the action, :meth:`~warden.store.tasks_sql.SqlTasks.latest_state_or_grant`'s
        answer) is an approved task, or deferred (``defer``) when it cannot be folded;
        None otherwise (:meth:`resolve` decides)."""
        if found is None or found[0][1] != ApprovalState.APPROVED.value or found[1] is None:
            return None
        if not self._folds(ask, consumer):
            approved: Task = found[1]
            if not defer or consumer is None or approved.expires_at <= self.now():
                return None  # a lapsed grant is expired by resolve's transaction
            consumed = replace(approved, state=ApprovalState.CONSUMED, consumed_by=consumer)
            return Resolution(
                Outcome.GRANTED, consumed, self._granted_text(consumed), deferred=True
            )
        # updated_at as stored (the guard compares the column's text).
        return self._folded_grant(ask, found[1], found[0][2], key, consumer)

    def _folds(self, ask: AskRequest, consumer: dict[str, Any] | None) -> bool:
        """Whether the desk's writes for ``ask`` may ride on the step's append: folding
        is on, the kind has no listener (a listener may read), the step is named."""
        return self.fold_filing and consumer is not None and ask.kind not in self.listeners

    def _folded_grant(
        self,
        ask: AskRequest,
        approved: Task,
        updated_at: str,
        key: tuple[str, str],
        consumer: dict[str, Any] | None,
    ) -> Resolution | None:
        """``approved`` consumed by the step's append (decision 645): the answer is the
        grant :meth:`resolve` gives, the consumption is written with the step's entry,
        guarded by the task's ``updated_at``. None when the grant cannot be folded (it
        lapsed: expiring it is a write of its own, :meth:`resolve`'s)."""
        if (
            not self._folds(ask, consumer)
            or approved.state is not ApprovalState.APPROVED
            or approved.expires_at <= self.now()
        ):
            return None
        assert consumer is not None
        consumed = replace(approved, state=ApprovalState.CONSUMED, consumed_by=consumer)
        return Resolution(
            Outcome.GRANTED,
            consumed,
            self._granted_text(consumed),
            guard=TaskUnchanged(approved.id, updated_at, *key),
            folded=_Consumption(self, approved, consumer, key),
        )

    def resolve(self, tx: DeskTx, ask: AskRequest, consumer: dict[str, Any]) -> Resolution:
        """Match ``ask`` against the tasks bound to its action (see the module doc).

        ``consumer`` identifies the step (``{"wire", "request_id" …}``); it is recorded
        on the task a grant is consumed by. Runs inside ``tx``.
        """
        digest = action_hash(ask.action)
        now = self.now()
        if ask.cited_task_id is not None:
            cited = tx.tasks.get(ask.cited_task_id)
            if cited is None or cited.scope != ask.scope or cited.action_hash != digest:
                return Resolution(
                    Outcome.INVALID,
                    None,
                    f"task {ask.cited_task_id} is not an approval of this action in this session",
                )
            latest: Task | None = self._expire_if_due(tx, cited, now)
        else:
            found = tx.tasks.latest_for(ask.scope, digest)
            latest = self._expire_if_due(tx, found, now) if found is not None else None
        if latest is not None:
            state = latest.state
            if state is ApprovalState.APPROVED or (
                state is ApprovalState.EXPIRED
                and latest.timeout_disposition == "allow"
                and latest.consumed_by is None
            ):
                task = self._transition(
                    tx,
                    latest,
                    replace(latest, state=ApprovalState.CONSUMED, consumed_by=consumer),
                    Event.CONSUMED,
                    by=None,
                    reason="allowed once on resubmission"
                    if state is ApprovalState.APPROVED
                    else "nobody answered in time; the rule's timeout disposition is allow",
                    extra={"consumer": consumer},
                )
                return Resolution(
                    Outcome.GRANTED,
                    task,
                    self._granted_text(task),
                    timed_out=state is ApprovalState.EXPIRED,
                )
            if state is ApprovalState.PENDING:
                latest = _shown_void(tx, [latest])[0]
                return Resolution(Outcome.PENDING, latest, self._pending_text(latest))
            if state in (ApprovalState.DENIED, ApprovalState.EXPIRED) and (
                latest.consumed_by is None or ask.cited_task_id is not None
            ):
                if latest.consumed_by is None:
                    # Reported once: the next identical request asks again.
                    reported = replace(latest, consumed_by=consumer, updated_at=now)
                    tx.tasks.transition(reported, latest)
                outcome = Outcome.DENIED if state is ApprovalState.DENIED else Outcome.EXPIRED
                return Resolution(outcome, latest, self._refused_text(latest))
            if ask.cited_task_id is not None:
                return Resolution(
                    Outcome.INVALID,
                    latest,
                    f"task {latest.id} is {state.value}; an approval authorizes one step only",
                )
        task = self._file(tx, ask, digest, now)
        return Resolution(Outcome.PENDING, task, self._pending_text(task))

    def release(self, task_id: str, consumer: dict[str, Any], why: str) -> None:
        """Give a consumed grant back when the step that consumed it could not be
        recorded (so the step was denied): consumed → approved, chained."""
        with self._transaction() as tx:
            task = tx.tasks.get(task_id)
            if task is None or task.state is not ApprovalState.CONSUMED:
                return
            if task.consumed_by != consumer:
                return
            self._transition(
                tx,
                task,
                replace(task, state=ApprovalState.APPROVED, consumed_by=None),
                Event.APPROVED,
                by=None,
                reason=f"grant restored: {why}",
            )

    def cancel(self, tx: DeskTx, task: Task, reason: str) -> Task:
        """Withdraw a pending task inside ``tx`` (its requester gave up): pending →
        canceled, chained and notified. Raises TaskConflict if it is no longer pending."""
        if task.state is not ApprovalState.PENDING:
            raise TaskConflict(
                f"task {task.id} is {task.state.value}; only a pending task can be canceled"
            )
        return self._transition(
            tx, task, replace(task, state=ApprovalState.CANCELED), Event.CANCELED, None, reason
        )

    def file(self, tx: DeskTx, ask: AskRequest) -> Task:
        """File a new pending task (no matching), e.g. a budget increase request."""
        return self._file(tx, ask, action_hash(ask.action), self.now())

    # -- the approvers' side ------------------------------------------------------------

    def approve(self, task_id: str, who: Approver, reason: str = "") -> Task:
        """One approval vote; the task is approved once ``approvals_required`` distinct
        approvers voted. Raises TaskNotFound, NotPermitted (own task, wrong group),
        TaskConflict (decided, expired, already voted)."""
        task = self._vote(task_id, who, "approve", reason)
        if (
            task.state is ApprovalState.APPROVED
            and self.fold_filing
            and task.kind not in self.listeners
        ):
            # Committed: the resubmission on this replica consumes it with its own entry
            # in the append's two round trips, no read first (decision 646).
            self._remember(task)
        return task

    def _remember(self, task: Task) -> None:
        """``task`` as the one :meth:`peek` answers its action from, with its
        ``updated_at`` as stored."""
        if len(self._pending_by_action) >= _PENDING_CACHE:
            self._pending_by_action.clear()
        self._pending_by_action[(task.scope, task.action_hash)] = (
            task.updated_at.isoformat(),
            task,
        )

    def deny(self, task_id: str, who: Approver, reason: str) -> Task:
        """Deny (one deny vetoes). Same errors as :meth:`approve`, and :class:`DeskError`
        (400) before anything is read when ``reason`` has no visible character
        (:func:`warden.reasons.says_something`, decision 973): the requester is told
        why."""
        if not says_something(reason):
            raise DeskError(f"a deny must say why; {NO_REASON}")
        return self._vote(task_id, who, "deny", reason)

    def reroute(self, task_id: str, who: Approver, group: str, reason: str = "") -> Task:
        """Send a pending task to another approver group. The votes cast so far are
        cleared (they were cast by the old group's approvers); the chained ``rerouted``
        entry lists them under ``votes_cleared`` (principal, key id, decision)."""
        text = _clean_reason(reason)
        group = group.strip()
        if not group or len(group) > 64:
            raise DeskError("the approver group must be 1..64 characters")
        with self._transaction() as tx:
            task = self._live(tx, task_id, who)
            if group == task.approver_group:
                raise TaskConflict(f"task {task_id} is already routed to {group!r}")
            tx.tasks.clear_votes(task.id)
            cleared = [
                {"principal": v.principal, "key_id": v.key_id, "decision": v.decision}
                for v in task.votes
            ]
            return self._transition(
                tx,
                task,
                replace(task, approver_group=group, votes=()),
                Event.REROUTED,
                by=who,
                reason=text,
                extra={
                    "from_group": task.approver_group,
                    "to_group": group,
                    "votes_cleared": cleared,
                },
            )

    def expire_due(self, limit: int = 100) -> int:
        """Expire every task whose time ran out; returns how many."""
        with self._transaction() as tx:
            now = self.now()
            due = tx.tasks.due(now, limit)
            for task in due:
                self._expire_if_due(tx, task, now)
            return len(due)

    def get(self, task_id: str) -> Task | None:
        """One task (expired first if due; votes of revoked keys shown void), or None."""
        with self._transaction() as tx:
            task = tx.tasks.get(task_id)
            if task is not None:
                task = self._expire_if_due(tx, task, self.now())
                task = _shown_void(tx, [task])[0]
            return task

    def list(
        self,
        *,
        states: tuple[ApprovalState, ...] = (),
        group: str | None = None,
        wire: str | None = None,
        limit: int = 100,
    ) -> list[Task]:
        """Tasks newest first (expired ones are expired first; votes of revoked keys
        shown void)."""
        self.expire_due()
        with self._transaction() as tx:
            return _shown_void(
                tx, tx.tasks.query(states=states, group=group, wire=wire, limit=limit)
            )

    # -- internals ----------------------------------------------------------------------

    def _vote(self, task_id: str, who: Approver, decision: str, reason: str) -> Task:
        text = _clean_reason(reason)
        with self._transaction() as tx:
            task = self._live(tx, task_id, who)
            at = self.now().isoformat()
            vote = Vote(who.principal, who.key_id, decision, text, at)
            # Counted now, in the database: a vote whose key was revoked since is void
            # (read before add_vote, which replaces such a vote of this principal).
            counted = task.with_void_keys(tx.tasks.revoked_vote_keys([task.id]))
            if not tx.tasks.add_vote(task.id, vote):
                raise TaskConflict(f"{who.principal} has already voted on task {task_id}")
            voted = replace(counted, votes=(*counted.votes, vote))
            voided = _newly_void(task, counted)
            if decision == "deny":
                return self._transition(
                    tx,
                    task,
                    replace(voted, state=ApprovalState.DENIED),
                    Event.DENIED,
                    who,
                    text,
                    extra=voided,
                )
            if len(voted.approvals()) < task.approvals_required:
                return self._transition(
                    tx,
                    task,
                    voted,
                    Event.VOTED,
                    who,
                    text,
                    extra={
                        "approvals": len(voted.approvals()),
                        "required": task.approvals_required,
                        **voided,
                    },
                )
            effect = self.effects.get(task.kind)
            # The grant is usable for as long as the ask was open, counted from now.
            window = task.expires_at - task.created_at
            approved = replace(voted, state=ApprovalState.APPROVED, expires_at=self.now() + window)
            task = self._transition(tx, task, approved, Event.APPROVED, who, text, extra=voided)
            if effect is not None:
                applied = effect(tx, task)
                task = self._transition(
                    tx,
                    task,
                    replace(task, state=ApprovalState.CONSUMED, consumed_by={"applied": applied}),
                    Event.CONSUMED,
                    by=None,
                    reason="applied on approval",
                    extra={"applied": applied},
                )
            return task

    def _live(self, tx: DeskTx, task_id: str, who: Approver) -> Task:
        """The pending task an approver may act on, or the reason they may not."""
        task = tx.tasks.get(task_id)
        if task is None:
            raise TaskNotFound(f"no approval task {task_id!r}")
        task = self._expire_if_due(tx, task, self.now())
        if task.state is not ApprovalState.PENDING:
            raise TaskConflict(
                f"task {task_id} is {task.state.value}; only a pending task can be decided"
            )
        if who.principal.casefold() in {n.casefold() for n in task.requester.names()}:
            maker = (
                f"{who.principal} owns the agent {task.requester.agent_id} that requested "
                f"task {task_id}"
                if task.requester.owns_agent(who.principal)
                else f"{who.principal} requested task {task_id}"
            )
            raise NotPermitted(f"{maker} and cannot decide it (maker-checker)")
        if not who.in_group(task.approver_group):
            raise NotPermitted(
                f"{who.principal} is not in approver group {task.approver_group!r} of task "
                f"{task_id}"
            )
        return task

    def _expire_if_due(self, tx: DeskTx, task: Task, now: datetime) -> Task:
        if task.state not in (ApprovalState.PENDING, ApprovalState.APPROVED):
            return task
        if task.expires_at > now:
            return task
        reason = (
            "nobody answered in time"
            if task.state is ApprovalState.PENDING
            else "the approval was not used in time"
        )
        if task.state is ApprovalState.APPROVED:
            # An unused grant that lapsed is a deny, whatever the timeout disposition.
            expired = replace(task, state=ApprovalState.EXPIRED, timeout_disposition="deny")
        else:
            expired = replace(task, state=ApprovalState.EXPIRED)
        try:
            return self._transition(tx, task, expired, Event.EXPIRED, by=None, reason=reason)
        except TaskConflict:
            fresh = tx.tasks.get(task.id)
            return fresh if fresh is not None else task

    def _file(self, tx: DeskTx, ask: AskRequest, digest: str, now: datetime) -> Task:
        return self._file_task(tx, self._new_task(ask, digest, now))

    def _new_task(self, ask: AskRequest, digest: str, now: datetime) -> Task:
        """The pending task ``ask`` files, not yet chained nor written."""
        return Task(
            id=f"task_{uuid.uuid4().hex}",
            kind=ask.kind,
            state=ApprovalState.PENDING,
            wire=ask.wire,
            created_at=now,
            updated_at=now,
            expires_at=now + timedelta(seconds=ask.timeout_s),
            action=ask.action if ask.shown_action is None else ask.shown_action,
            action_hash=digest,
            scope=ask.scope,
            requester=ask.requester,
            approver_group=ask.approver_group,
            approvals_required=ask.approvals_required,
            question=ask.question,
            timeout_disposition=ask.timeout_disposition,
            correlation=ask.correlation,
            policy=ask.policy,
            detail=ask.detail,
        )

    def _file_task(self, tx: DeskTx, task: Task) -> Task:
        """Write a new pending task: its desk-chain entry, its row, its outbox rows."""
        entry = self._record(tx, task, Event.REQUESTED, None, "", {})
        task = replace(task, history=(entry,))
        tx.tasks.put(task)
        self._notify(tx, task, Event.REQUESTED)
        return task

    def _transition(
        self,
        tx: DeskTx,
        before: Task,
        after: Task,
        event: Event,
        by: Approver | None,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> Task:
        after = replace(after, updated_at=self.now())
        entry = self._record(tx, after, event, by, reason, extra or {})
        after = replace(after, history=(*before.history, entry))
        if not tx.tasks.transition(after, before):
            raise TaskConflict(f"task {before.id} changed meanwhile; reload it and try again")
        listener = self.listeners.get(after.kind)
        if listener is not None:
            listener(tx, after, event, by, reason)
        self._notify(tx, after, event)
        return after

    def _record(
        self,
        tx: DeskTx,
        task: Task,
        event: Event,
        by: Approver | None,
        reason: str,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """Chain the transition; the history item the task keeps (with the entry hash)."""
        actor = {"principal": by.principal, "key_id": by.key_id} if by is not None else None
        detail: dict[str, Any] = {
            "task_id": task.id,
            "event": event.value,
            "state": task.state.value,
            "by": actor,
            "reason": reason,
            "kind": task.kind.value,
            "wire": task.wire,
            "scope": task.scope,
            "action_hash": task.action_hash,
            "approver_group": task.approver_group,
            "expires_at": task.expires_at.isoformat(),
            **extra,
        }
        if event is Event.REQUESTED:
            detail.update(
                action=task.action,
                requester=task.requester.to_dict(),
                policy=task.policy,
                correlation=task.correlation,
                approvals_required=task.approvals_required,
                question=task.question,
                # What `warden verify` needs to rebuild the task row (issue 17): a
                # disposition flipped to allow, or a budget increase's cap, is caught.
                timeout_disposition=task.timeout_disposition,
                detail=task.detail,
            )
        entry = self._chain.append(tx, DESK_CHAIN, event.value, str(uuid.uuid4()), detail)
        return {
            "event": event.value,
            "at": entry["timestamp"],
            "by": actor,
            "reason": reason,
            "entry_hash": entry["entry_hash"],
            **extra,
        }

    def _notify(self, tx: DeskTx, task: Task, event: Event) -> None:
        if self.notifier is not None:
            self.notifier.enqueue(tx.outbox, self.view(task), event.value, self.now())

    def view(self, task: Task) -> dict[str, Any]:
        """The task as every surface shows it (with its desk URL when one is set)."""
        out = task.to_dict()
        url = self.task_url(task.id)
        if url is not None:
            out["url"] = url
        return out

    # -- texts --------------------------------------------------------------------------

    def _pending_text(self, task: Task) -> str:
        where = self.task_url(task.id) or f"GET /v1/approvals/{task.id}"
        return (
            f"Awaiting approval: task {task.id} ({task.approver_group}, "
            f"{len(task.approvals())}/{task.approvals_required} approvals) until "
            f"{task.expires_at.isoformat()}; see {where}. Once approved, resubmit the same "
            "request: it is allowed once."
        )

    @staticmethod
    def _granted_text(task: Task) -> str:
        names = ", ".join(v.principal for v in task.approvals()) or "timeout disposition"
        return f"Allowed once by approval task {task.id} ({names})."

    @staticmethod
    def _refused_text(task: Task) -> str:
        if task.state is ApprovalState.DENIED:
            deny = next((v for v in task.votes if v.decision == "deny"), None)
            who = f" by {deny.principal}" if deny is not None else ""
            why = f": {deny.reason}" if deny is not None and deny.reason else ""
            return f"Approval task {task.id} was denied{who}{why}."
        return f"Approval task {task.id} expired before it was approved."


class _Filing:
    """A task filed in the step's append transaction (:class:`FoldedWrite`)."""

    def __init__(self, desk: ApprovalDesk, task: Task, key: tuple[str, str]) -> None:
        self._desk = desk
        self._task = task
        self._key = key
        self._filed: Task | None = None

    @property
    def locks(self) -> tuple[str, ...]:
        return ()

    @property
    def chains(self) -> tuple[str, ...]:
        return (desk_session_id(),)

    @property
    def absent(self) -> tuple[NoLiveTask, ...]:
        return (NoLiveTask(*self._key),)

    def write(self, tx: Any) -> None:
        self._filed = self._desk._file_task(tx, self._task)  # noqa: SLF001

    def committed(self) -> None:
        """Remember the filed task as pending, as :meth:`ApprovalDesk.peek` would once
        it read it: the next ask of the action is answered from memory."""
        task = self._filed
        if task is None:
            return
        self._desk._remember(task)  # noqa: SLF001


class _Consumption:
    """An approved task consumed in the step's append transaction (:class:`FoldedWrite`,
    decision 645): approved → consumed, chained and notified, committed with the entry
    of the step it allows or not at all. The append's read guard (the task's
    ``updated_at``, read after the desk chain is locked) finds it still approved."""

    def __init__(
        self, desk: ApprovalDesk, task: Task, consumer: dict[str, Any], key: tuple[str, str]
    ) -> None:
        self._desk = desk
        self._task = task
        self._consumer = consumer
        self._key = key

    @property
    def locks(self) -> tuple[str, ...]:
        # The desk's own transactions lock a task before the desk chain (resolve's
        # ``latest_for``, an approver's ``_live``): the same order, so no deadlock.
        return (self._task.id,)

    @property
    def chains(self) -> tuple[str, ...]:
        return (desk_session_id(),)

    @property
    def absent(self) -> tuple[NoLiveTask, ...]:
        return ()

    def write(self, tx: Any) -> None:
        task = self._task
        self._desk._transition(  # noqa: SLF001
            tx,
            task,
            replace(task, state=ApprovalState.CONSUMED, consumed_by=self._consumer),
            Event.CONSUMED,
            by=None,
            reason="allowed once on resubmission",
            extra={"consumer": self._consumer},
        )

    def committed(self) -> None:
        """The grant is used: the next ask of the action files a new task."""
        known = self._desk._pending_by_action  # noqa: SLF001
        hit = known.get(self._key)
        if hit is not None and hit[1].id == self._task.id:
            known.pop(self._key, None)
