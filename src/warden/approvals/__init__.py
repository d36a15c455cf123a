"""Approval tasks: work that waits for a human (issue 4 builds the approval desk on these)."""

from warden.approvals.tasks import Task, TaskKind, TaskStatus

__all__ = ["Task", "TaskKind", "TaskStatus"]
