"""The trail of one action request: its stored records, in the order seed 004 writes them.

An action request (or a record held for review), then Warden's policy decision, the
approval events an approver's decisions on the desk wrote, and the audit event of the
agent's outcome. The outcome and read paths judge a request by its trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warden.store.kla_sql import KlaRow


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
