"""The approval desk's refusals (:class:`DeskError` and its kinds), each with its HTTP status.

Apart from :mod:`warden.approvals.desk`, which mypyc compiles: a class compiled by mypyc
that subclasses a class it does not compile (:class:`~warden.errors.WardenError`) loses
the class attributes its body sets, here ``reason`` and ``status`` (decision 1164).
:mod:`warden.approvals.desk` re-exports them.
"""

from __future__ import annotations

from warden.errors import WardenError

__all__ = ["DeskError", "NotPermitted", "TaskConflict", "TaskNotFound"]


class DeskError(WardenError):
    """An approver's request the desk refuses; ``status`` is the HTTP status."""

    reason = "desk_error"
    status = 400


class TaskNotFound(DeskError):
    reason = "task_not_found"
    status = 404


class NotPermitted(DeskError):
    """Maker-checker or group membership forbids this approver."""

    reason = "not_permitted"
    status = 403


class TaskConflict(DeskError):
    """The task is no longer pending, or this approver already voted."""

    reason = "task_conflict"
    status = 409
