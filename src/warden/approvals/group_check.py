"""Whether an approver group has anyone in it: the warning a re-route to an empty group
carries on ``POST /v1/approvals/{id}/reroute``, ``warden approvals reroute`` and the desk
(docs/decisions.md 249)."""

from __future__ import annotations

from warden.identity.api_keys import ApiKeys


def empty_group_warning(keys: ApiKeys, group: str) -> str | None:
    """The warning for a task re-routed to ``group`` when no active approver key is in
    it, or None. The re-route stands (the group may be filled later with ``warden keys
    create --role approver --group <group>``); admins, who are in every group, can still
    decide the task. Raises what :meth:`ApiKeys.list` raises when the store fails."""
    if keys.has_active_approver(group):
        return None
    return (
        f"no active approver key is in group {group!r}: until one is created "
        f"(warden keys create --role approver --group {group}) only an admin can decide "
        "this task"
    )
