"""SQL for tasks: :class:`SqlTasks` on the ``tasks`` table (migration 0003), inside
the caller's open write transaction. The task is a JSON record beside the columns
that are queried (kind, status, times)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from warden.approvals.tasks import Task, TaskKind, TaskStatus
from warden.crypto.canonical import parse_strict_json


def _record(task: Task) -> str:
    return json.dumps(
        {
            "id": task.id,
            "kind": task.kind.value,
            "status": task.status.value,
            "created_at": task.created_at.isoformat(),
            "updated_at": task.updated_at.isoformat(),
            "detail": task.detail,
        },
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )


def _task(text: str) -> Task:
    rec = parse_strict_json(text)
    return Task(
        id=rec["id"],
        kind=TaskKind(rec["kind"]),
        status=TaskStatus(rec["status"]),
        created_at=datetime.fromisoformat(rec["created_at"]),
        updated_at=datetime.fromisoformat(rec["updated_at"]),
        detail=rec.get("detail") or {},
    )


class SqlTasks:
    """:class:`~warden.approvals.tasks.TaskStore` on an open DB-API cursor."""

    def __init__(self, cur: Any, q: Any) -> None:
        self._cur = cur
        self._q = q

    def put(self, task: Task) -> None:
        params = (
            task.kind.value,
            task.status.value,
            _record(task),
            task.created_at.isoformat(),
            task.updated_at.isoformat(),
            task.id,
        )
        self._cur.execute(
            self._q(
                "UPDATE tasks SET kind = ?, status = ?, record = ?, created_at = ?, "
                "updated_at = ? WHERE task_id = ?"
            ),
            params,
        )
        if self._cur.rowcount == 0:
            self._cur.execute(
                self._q(
                    "INSERT INTO tasks (kind, status, record, created_at, updated_at, task_id) "
                    "VALUES (?, ?, ?, ?, ?, ?)"
                ),
                params,
            )

    def get(self, task_id: str) -> Task | None:
        self._cur.execute(self._q("SELECT record FROM tasks WHERE task_id = ?"), (task_id,))
        row = self._cur.fetchone()
        return _task(row[0]) if row is not None else None
