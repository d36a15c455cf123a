"""Approval tasks: one human decision about one exact action, polled by the agent.

A task is bound to the canonical hash of the action it asks about
(:func:`warden.approvals.binding.action_hash`), the session (or requester scope)
it came from, the bundle and rules that asked, the requester, and an expiry.
Its life, every step chained on the approval desk's audit chain
(:mod:`warden.approvals.desk`)::

    pending ──approve (N distinct approvers)──▶ approved ──resubmission──▶ consumed
       │ ├──deny (any one approver)──▶ denied
       │ └──re-route──▶ pending (another approver group; the votes so far are cleared)
       └──timeout──▶ expired  (a resubmission is then a deny, or — where the rule's
                              timeout_disposition is allow — allowed once: consumed)

``state`` is the desk's vocabulary; ``status`` projects it on the Governed Spend
task statuses (specs/adcp-spend-kla.md §2.5: ``input_required`` while a human is
needed, ``completed`` once approved, ``failed`` when denied or expired).

A vote counts only while the key that cast it is not revoked: a key revoked before the
task is decided voids its votes (:attr:`Vote.void`), counted in the database at the
vote that would decide the task (docs/decisions.md, Hardening: approvals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Protocol, get_args


class TaskStatus(StrEnum):
    """Governed Spend task status (an underscore where AdCP writes ``input-required``)."""

    INPUT_REQUIRED = "input_required"
    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELED)


#: The wires an approval task comes from (``Task.wire``): ACS steps, MCP's included
#: (``gates/approval.py``), AdCP checks (``adcp/check_gates.py``), KLA (``kla/asks.py``)
#: and the spend API (``spend/asks.py``). ``/v1/approvals`` and ``/desk`` filter on these
#: and refuse any other (decision 1156).
TaskWire = Literal["acs", "adcp", "kla", "spend"]
TASK_WIRES: tuple[str, ...] = get_args(TaskWire)


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CONSUMED = "consumed"
    CANCELED = "canceled"

    @property
    def decided(self) -> bool:
        """No approver can act on it any more."""
        return self is not ApprovalState.PENDING

    @property
    def status(self) -> TaskStatus:
        return _STATUS[self]


_STATUS = {
    ApprovalState.PENDING: TaskStatus.INPUT_REQUIRED,
    ApprovalState.APPROVED: TaskStatus.COMPLETED,
    ApprovalState.CONSUMED: TaskStatus.COMPLETED,
    ApprovalState.DENIED: TaskStatus.FAILED,
    ApprovalState.EXPIRED: TaskStatus.FAILED,
    ApprovalState.CANCELED: TaskStatus.CANCELED,
}


class TaskKind(StrEnum):
    #: A step of an agent (ACS, MCP, action request): allowed once on resubmission.
    ACTION = "action"
    #: A spend quote: reserved once on resubmission.
    SPEND_APPROVAL = "spend_approval"
    #: A higher budget cap: applied when approved (nothing to resubmit).
    BUDGET_INCREASE = "budget_increase"
    #: An AI agent action request (``POST /v1/action-requests``) the policy decided
    #: require_approval: each decision is an approval event; the outcome consumes it.
    ACTION_REQUEST = "action_request"
    #: An AdCP check_governance a human reviews (plan human_review_required, a
    #: reallocation over the threshold, or a policy ask): approving issues the verdict.
    ADCP_CHECK = "adcp_check"


#: Why a vote no longer counts: its key was revoked before the task was decided.
VOID_KEY_REVOKED = "key revoked"


class Event(StrEnum):
    """Desk transitions, each one audit entry ``warden/approval.<event>``."""

    REQUESTED = "requested"
    VOTED = "voted"
    APPROVED = "approved"
    DENIED = "denied"
    REROUTED = "rerouted"
    EXPIRED = "expired"
    CONSUMED = "consumed"
    CANCELED = "canceled"


@dataclass(frozen=True)
class Requester:
    """Who asked, as Warden verified it: the agent and the principal accountable for it
    (a registered agent's owner; the caller's own principal for other keys). Neither may
    approve the task (maker-checker), and both may read it.

    ``claimed_user_id`` is the ``user_context.user_id`` the agent claimed (issue 15): it
    is recorded and shown as a claim, and never excludes or admits an approver nor grants
    visibility (:meth:`names` leaves it out).
    """

    agent_id: str
    principal: str | None = None
    claimed_user_id: str | None = None

    def names(self) -> frozenset[str]:
        """The makers: the agent and its accountable principal (never the claim)."""
        return frozenset(n for n in (self.agent_id, self.principal) if n)

    def owns_agent(self, name: str) -> bool:
        """True when ``name`` is a maker only as the owner of the requesting agent (not
        the agent itself), compared case-insensitively like :meth:`names`; maker-checker
        refusals then say "owns the agent", not "requested"."""
        folded = name.casefold()
        return (
            self.principal is not None
            and self.principal.casefold() == folded
            and self.agent_id.casefold() != folded
        )

    def to_dict(self) -> dict[str, Any]:
        """``{agent_id, principal}``, plus ``claimed_user_id`` when the agent claimed one."""
        out: dict[str, Any] = {"agent_id": self.agent_id, "principal": self.principal}
        if self.claimed_user_id is not None:
            out["claimed_user_id"] = self.claimed_user_id
        return out


@dataclass(frozen=True)
class Vote:
    """One approver's answer: ``decision`` is ``approve`` or ``deny``; ``at`` RFC 3339.

    ``void`` says why the vote no longer counts (``"key revoked"``: the key that cast
    it was revoked before the task was decided); None while it counts.
    """

    principal: str
    key_id: str
    decision: str
    reason: str
    at: str
    void: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "principal": self.principal,
            "key_id": self.key_id,
            "decision": self.decision,
            "reason": self.reason,
            "at": self.at,
        }
        if self.void is not None:
            out["void"] = self.void
        return out


@dataclass(frozen=True)
class Task:
    """One approval task.

    ``action`` is ``{name, method, arguments}`` as hashed into ``action_hash`` (64
    lowercase hex), except that a value a modify rule redacts is stored and shown as
    its replacement (``[REDACTED]``; the hash covers the value received); ``scope``
    is what a grant is valid in (the ACS session id, or ``spend:<principal>``);
    ``correlation`` carries the wire's ids (request id, turn id …); ``policy`` is
    ``{bundle: {id, version, digest}, rules, reasoning, reason_codes[,
    modifications]}`` (``modifications``: what a grant still applies); ``ask`` the
    question, approver group, the number of approvals required and the timeout
    disposition; ``history`` every transition with its audit
    entry hash; ``detail`` what the kind needs (a budget increase's budget and cap).
    """

    id: str
    kind: TaskKind
    state: ApprovalState
    wire: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    action: dict[str, Any]
    action_hash: str
    scope: str
    requester: Requester
    approver_group: str
    approvals_required: int = 1
    question: str = ""
    timeout_disposition: str = "deny"
    correlation: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    votes: tuple[Vote, ...] = ()
    history: tuple[dict[str, Any], ...] = ()
    consumed_by: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> TaskStatus:
        return self.state.status

    def approvals(self) -> list[Vote]:
        """The approve votes that count (not void)."""
        return [v for v in self.votes if v.decision == "approve" and v.void is None]

    def with_void_keys(self, key_ids: frozenset[str] | set[str]) -> Task:
        """This task with the votes cast by ``key_ids`` marked void (``key revoked``);
        a task already decided keeps its votes as they were counted."""
        if self.state.decided or not any(
            v.key_id in key_ids and v.void is None for v in self.votes
        ):
            return self
        votes = tuple(
            replace(v, void=VOID_KEY_REVOKED) if v.key_id in key_ids and v.void is None else v
            for v in self.votes
        )
        return replace(self, votes=votes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (stored, rendered by every surface, sent in notifications)."""
        return {
            "id": self.id,
            "kind": self.kind.value,
            "state": self.state.value,
            "status": self.status.value,
            "wire": self.wire,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "action": self.action,
            "action_hash": self.action_hash,
            "scope": self.scope,
            "requester": self.requester.to_dict(),
            "approver_group": self.approver_group,
            "approvals_required": self.approvals_required,
            "question": self.question,
            "timeout_disposition": self.timeout_disposition,
            "correlation": self.correlation,
            "policy": self.policy,
            "votes": [v.to_dict() for v in self.votes],
            "history": list(self.history),
            "consumed_by": self.consumed_by,
            "detail": self.detail,
        }

    @staticmethod
    def from_dict(rec: dict[str, Any]) -> Task:
        """A stored record; one written before the desk (migration 0003: a ``status``, no
        ``state``) reads as pending until it expires a week after it was filed."""
        req = rec.get("requester") or {}
        created = datetime.fromisoformat(rec["created_at"])
        state = rec.get("state") or _LEGACY_STATE.get(rec.get("status", ""), "canceled")
        expires = rec.get("expires_at")
        return Task(
            id=rec["id"],
            kind=TaskKind(rec["kind"]),
            state=ApprovalState(state),
            wire=rec.get("wire", "spend"),
            created_at=created,
            updated_at=datetime.fromisoformat(rec["updated_at"]),
            expires_at=datetime.fromisoformat(expires) if expires else created + _LEGACY_WINDOW,
            action=rec.get("action") or {},
            action_hash=rec.get("action_hash", ""),
            scope=rec.get("scope", ""),
            requester=Requester(
                req.get("agent_id", ""), req.get("principal"), req.get("claimed_user_id")
            ),
            approver_group=rec.get("approver_group", ""),
            approvals_required=int(rec.get("approvals_required", 1)),
            question=rec.get("question", ""),
            timeout_disposition=rec.get("timeout_disposition", "deny"),
            correlation=rec.get("correlation") or {},
            policy=rec.get("policy") or {},
            votes=tuple(Vote(**v) for v in rec.get("votes") or ()),
            history=tuple(rec.get("history") or ()),
            consumed_by=rec.get("consumed_by"),
            detail=rec.get("detail") or {},
        )


_LEGACY_STATE = {"input_required": "pending", "completed": "consumed", "failed": "denied"}
_LEGACY_WINDOW = timedelta(days=7)


class TaskStore(Protocol):
    """Tasks inside the caller's open write transaction."""

    def put(self, task: Task) -> None:
        """Insert or update."""
        ...

    def get(self, task_id: str) -> Task | None: ...

    def transition(self, task: Task, before: Task) -> bool:
        """Write ``task`` only if the stored task is still ``before`` (same state and
        ``updated_at``: the database decides a race between replicas); True if written."""
        ...

    def latest_for(self, scope: str, action_hash: str) -> Task | None:
        """The newest task bound to this action in this scope."""
        ...

    def add_vote(self, task_id: str, vote: Vote) -> bool:
        """Record a vote; False if this principal already voted on this task with a key
        that is not revoked (a vote by a revoked key is replaced)."""
        ...

    def revoked_vote_keys(self, task_ids: Sequence[str]) -> set[str]:
        """The key ids, among the votes on these tasks, of keys revoked since (read
        from the key table in this transaction, so every replica sees the same)."""
        ...

    def clear_votes(self, task_id: str) -> None:
        """Delete every vote on the task (it was re-routed)."""
        ...

    def due(self, now: datetime, limit: int = 100) -> list[Task]:
        """Pending or approved tasks whose expiry has passed."""
        ...

    def query(
        self,
        *,
        states: tuple[ApprovalState, ...] = (),
        group: str | None = None,
        wire: str | None = None,
        limit: int = 100,
    ) -> list[Task]:
        """Tasks newest first, filtered."""
        ...
