"""Tasks: a request that waits for someone, polled by the agent that made it.

Statuses use the Governed Spend spelling (specs/adcp-spend-kla.md §2.5:
``working``, ``completed``, ``failed``, ``input_required`` — an underscore, where
AdCP writes ``input-required``). A task is created ``input_required`` when a
human must decide; the approval desk that decides it (maker-checker, expiry,
notifications) is issue 4. Until then nothing moves a task on: it is a durable,
pollable record of the request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class TaskStatus(StrEnum):
    INPUT_REQUIRED = "input_required"
    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELED)


class TaskKind(StrEnum):
    BUDGET_INCREASE = "budget_increase"
    SPEND_APPROVAL = "spend_approval"


@dataclass(frozen=True)
class Task:
    """One task: ``detail`` holds what the kind needs (for a budget increase: the
    budget, its current and requested cap, the currency and the reason)."""

    id: str
    kind: TaskKind
    status: TaskStatus
    created_at: datetime
    updated_at: datetime
    detail: dict[str, Any] = field(default_factory=dict)


class TaskStore(Protocol):
    """Tasks inside the caller's open write transaction."""

    def put(self, task: Task) -> None:
        """Insert or update."""
        ...

    def get(self, task_id: str) -> Task | None: ...
