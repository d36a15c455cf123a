"""The trail of one action request: its stored records, in the order seed 004 writes them.

An action request (or a record held for review), then Warden's policy decision, the
approval events an approver's decisions on the desk wrote, and the audit event of the
agent's outcome. The outcome and read paths judge a request by its trail.

An action request is the pair (principal, action_request_id) (decision 970): the ids are
each principal's own. :func:`find` and :func:`find_record` read one as its caller may:
an agent its own only (another's is None, as a missing one), an approver or admin
anyone's, naming whose when several principals used the id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warden.identity.api_keys import Identity, Role
from warden.kla.evidence import SeveralOwners
from warden.store.kla_sql import KlaRow, SqlKlaRecords


@dataclass
class Trail:
    """The stored records of one action request."""

    request: KlaRow
    decision: KlaRow | None
    approvals: list[KlaRow]
    audit: KlaRow | None

    @classmethod
    def of(cls, rows: list[KlaRow], rid: str) -> Trail | None:
        request = next((r for r in rows if r.kind == "action_request" and r.record_id == rid), None)
        if request is None:
            return None
        return cls(
            request,
            next((r for r in rows if r.kind == "policy_decision"), None),
            [r for r in rows if r.kind == "approval_event"],
            next((r for r in rows if r.kind == "audit_event"), None),
        )

    def approval(self) -> tuple[KlaRow, dict[str, Any]] | None:
        """The approval event that stands: the approve, else the deny, else the last
        re-route (a task is approved or denied once; it may be re-routed several times)."""
        events = [(r, r.value()) for r in self.approvals]
        for outcome in ("approve", "deny", "re_route"):
            found = [e for e in events if e[1]["outcome"] == outcome]
            if found:
                return found[-1]
        return None


def reads_all(who: Identity) -> bool:
    """Approvers and admins read every principal's records; an agent only its own."""
    return who.may(Role.APPROVER)


def _owner(who: Identity, principal: str | None) -> str | None:
    """Whose records ``who`` asks for: an agent's own (``""``, nobody's, when it names
    another: that reads as missing), the principal a reader of all named, or None (any
    principal's, for a reader of all naming none)."""
    if reads_all(who):
        return principal
    return who.principal if principal in (None, who.principal) else ""


def _one(rows: list[KlaRow], rid: str, what: str) -> list[KlaRow]:
    owners = sorted({r.principal for r in rows})
    if len(owners) > 1:
        raise SeveralOwners(rid, owners, what)
    return rows


def find(kla: SqlKlaRecords, rid: str, who: Identity, principal: str | None = None) -> Trail | None:
    """The trail of the action request ``rid`` as ``who`` may read it (module doc), or
    None. Raises :class:`SeveralOwners` when a reader of all names no principal and
    several principals' requests carry ``rid``."""
    owner = _owner(who, principal)
    if owner == "":
        return None
    rows = kla.for_request(rid, owner)
    if owner is None:
        requests = [r for r in rows if r.kind == "action_request" and r.record_id == rid]
        mine = {r.principal for r in _one(requests, rid, "action request")}
        rows = [r for r in rows if r.principal in mine]
    return Trail.of(rows, rid)


def find_record(
    kla: SqlKlaRecords, record_id: str, who: Identity, principal: str | None = None
) -> KlaRow | None:
    """The record ``record_id`` as ``who`` may read it (module doc), or None. Raises
    :class:`SeveralOwners` as :func:`find` does."""
    owner = _owner(who, principal)
    if owner is None:
        found = _one(kla.with_id(record_id), record_id, "record id")
        return found[0] if found else None
    return kla.get(record_id, owner) if owner else None
