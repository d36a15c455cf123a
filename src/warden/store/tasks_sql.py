"""SQL for approval tasks: :class:`SqlTasks` on the ``tasks`` and ``approval_votes``
tables (migrations 0003, 0004), inside the caller's open write transaction.

The task is a JSON record beside the columns that are queried (kind, state,
scope, action hash, expiry, approver group). Races between replicas are decided
by the database: a transition is a conditional ``UPDATE … WHERE state = ?`` and a
vote a primary key on (task, principal). Whether a vote's key was revoked is read from
``api_keys`` in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from warden.approvals.tasks import ApprovalState, Task, Vote
from warden.crypto.canonical import parse_strict_json
from warden.store.driver_errors import is_integrity

_LIVE = (ApprovalState.PENDING.value, ApprovalState.APPROVED.value)

#: The newest task bound to an action: its id, state, updated_at and expires_at as stored,
#: and its record when it is approved (parameters: the approved state, scope, action hash).
LATEST_OR_GRANT = (
    "SELECT task_id, state, updated_at, expires_at, "
    "CASE WHEN state = ? THEN record END FROM tasks "
    "WHERE session_id = ? AND action_hash = ? "
    "ORDER BY created_at DESC, task_id DESC LIMIT 1"
)

#: :func:`grant_row`'s answer: the newest task's (id, state, updated_at, expires_at) and,
#: approved, the task.
LatestOrGrant = tuple[tuple[str, str, str, str], Task | None]


def grant_row(row: Any) -> LatestOrGrant | None:
    """A row of :data:`LATEST_OR_GRANT` parsed (None: no task is bound to the action)."""
    if row is None:
        return None
    head = (str(row[0]), str(row[1]), str(row[2]), str(row[3]))
    return head, Task.from_dict(parse_strict_json(row[4])) if row[4] is not None else None


def _record(task: Task) -> str:
    return json.dumps(task.to_dict(), ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _columns(task: Task) -> tuple[Any, ...]:
    return (
        task.kind.value,
        task.status.value,
        _record(task),
        task.created_at.isoformat(),
        task.updated_at.isoformat(),
        task.state.value,
        task.action_hash,
        task.scope,
        task.expires_at.isoformat(),
        task.approver_group,
    )


class SqlTasks:
    """:class:`~warden.approvals.tasks.TaskStore` on an open DB-API cursor."""

    _SET = (
        "kind = ?, status = ?, record = ?, created_at = ?, updated_at = ?, state = ?, "
        "action_hash = ?, session_id = ?, expires_at = ?, approver_group = ?"
    )

    def __init__(self, cur: Any, q: Any, *, row_locks: bool = False) -> None:
        self._cur = cur
        self._q = q
        # PostgreSQL: a task read in a write transaction is locked until it ends, so two
        # replicas resolving one grant take turns and the second sees it consumed
        # (instead of losing the conditional update and failing closed).
        self._for_update = " FOR UPDATE" if row_locks else ""

    def put(self, task: Task) -> None:
        self._cur.execute(
            self._q(
                "INSERT INTO tasks (kind, status, record, created_at, updated_at, state, "
                "action_hash, session_id, expires_at, approver_group, task_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET "
                "kind = excluded.kind, status = excluded.status, record = excluded.record, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "state = excluded.state, action_hash = excluded.action_hash, "
                "session_id = excluded.session_id, expires_at = excluded.expires_at, "
                "approver_group = excluded.approver_group"
            ),
            (*_columns(task), task.id),
        )

    def transition(self, task: Task, before: Task) -> bool:
        self._cur.execute(
            self._q(
                f"UPDATE tasks SET {self._SET} WHERE task_id = ? AND state = ? AND updated_at = ?"
            ),
            (*_columns(task), task.id, before.state.value, before.updated_at.isoformat()),
        )
        return bool(self._cur.rowcount == 1)

    def get(self, task_id: str) -> Task | None:
        self._cur.execute(
            self._q("SELECT record FROM tasks WHERE task_id = ?" + self._for_update), (task_id,)
        )
        row = self._cur.fetchone()
        return Task.from_dict(parse_strict_json(row[0])) if row is not None else None

    def latest_state(self, scope: str, action_hash: str) -> tuple[str, str, str, str] | None:
        """``(task_id, state, updated_at, expires_at)`` of the newest task bound to the
        action, without its record (for a read that usually needs no parse)."""
        self._cur.execute(
            self._q(
                "SELECT task_id, state, updated_at, expires_at FROM tasks "
                "WHERE session_id = ? AND action_hash = ? "
                "ORDER BY created_at DESC, task_id DESC LIMIT 1"
            ),
            (scope, action_hash),
        )
        row = self._cur.fetchone()
        return (str(row[0]), str(row[1]), str(row[2]), str(row[3])) if row is not None else None

    def latest_state_or_grant(self, scope: str, action_hash: str) -> LatestOrGrant | None:
        """:meth:`latest_state` and, when that task is approved, the task itself, in one
        read (decision 703): the grant an ask consumes without a second round trip."""
        self._cur.execute(
            self._q(LATEST_OR_GRANT),
            (ApprovalState.APPROVED.value, scope, action_hash),
        )
        return grant_row(self._cur.fetchone())

    def latest_for(self, scope: str, action_hash: str) -> Task | None:
        self._cur.execute(
            self._q(
                "SELECT record FROM tasks WHERE session_id = ? AND action_hash = ? "
                "ORDER BY created_at DESC, task_id DESC LIMIT 1" + self._for_update
            ),
            (scope, action_hash),
        )
        row = self._cur.fetchone()
        return Task.from_dict(parse_strict_json(row[0])) if row is not None else None

    def add_vote(self, task_id: str, vote: Vote) -> bool:
        # A vote cast with a key revoked since is void: its principal may vote again.
        self._cur.execute(
            self._q(
                "DELETE FROM approval_votes WHERE task_id = ? AND principal = ? AND key_id IN "
                "(SELECT key_id FROM api_keys WHERE revoked_at IS NOT NULL)"
            ),
            (task_id, vote.principal),
        )
        # A savepoint keeps the transaction usable after a duplicate (PostgreSQL aborts
        # the whole transaction on an error otherwise).
        self._cur.execute("SAVEPOINT vote")
        try:
            self._cur.execute(
                self._q(
                    "INSERT INTO approval_votes (task_id, principal, key_id, decision, reason, at) "
                    "VALUES (?, ?, ?, ?, ?, ?)"
                ),
                (task_id, vote.principal, vote.key_id, vote.decision, vote.reason, vote.at),
            )
        except Exception as exc:
            self._cur.execute("ROLLBACK TO SAVEPOINT vote")
            if is_integrity(exc):
                return False
            raise
        self._cur.execute("RELEASE SAVEPOINT vote")
        return True

    def revoked_vote_keys(self, task_ids: Sequence[str]) -> set[str]:
        if not task_ids:
            return set()
        marks = ", ".join("?" for _ in task_ids)
        # PostgreSQL: the voters' key rows are share-locked, so a revocation committing
        # meanwhile is ordered after this transaction (or seen by it), never lost between.
        lock = " FOR SHARE OF k" if self._for_update else ""
        self._cur.execute(
            self._q(
                "SELECT v.key_id, k.revoked_at FROM approval_votes v JOIN api_keys k "
                f"ON k.key_id = v.key_id WHERE v.task_id IN ({marks})" + lock
            ),
            tuple(task_ids),
        )
        return {str(key_id) for key_id, revoked_at in self._cur.fetchall() if revoked_at}

    def clear_votes(self, task_id: str) -> None:
        self._cur.execute(self._q("DELETE FROM approval_votes WHERE task_id = ?"), (task_id,))

    def due(self, now: datetime, limit: int = 100) -> list[Task]:
        # expires_at is ISO 8601 UTC with a fixed offset, so text order is time order.
        self._cur.execute(
            self._q(
                "SELECT record FROM tasks WHERE state IN (?, ?) AND expires_at <= ? "
                "ORDER BY expires_at LIMIT ?"
            ),
            (*_LIVE, now.isoformat(), limit),
        )
        return [Task.from_dict(parse_strict_json(r[0])) for r in self._cur.fetchall()]

    def query(
        self,
        *,
        states: tuple[ApprovalState, ...] = (),
        group: str | None = None,
        wire: str | None = None,
        limit: int = 100,
    ) -> list[Task]:
        where = ["state IS NOT NULL"]
        params: list[Any] = []
        if states:
            where.append("state IN (" + ", ".join("?" for _ in states) + ")")
            params.extend(s.value for s in states)
        if group is not None:
            where.append("approver_group = ?")
            params.append(group)
        sql = (
            f"SELECT record FROM tasks WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, task_id DESC"
        )
        self._cur.execute(self._q(sql), tuple(params))
        out: list[Task] = []
        for (text,) in self._cur.fetchall():
            task = Task.from_dict(parse_strict_json(text))
            if wire is not None and task.wire != wire:
                continue
            out.append(task)
            if len(out) >= limit:
                break
        return out
