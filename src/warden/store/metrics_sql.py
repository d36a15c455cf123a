"""Scrape-time reads for ``GET /metrics``: short, bounded queries on the store's own
connection (under its writer lock, like every other read), each answering in one
round trip. Nothing here writes.

Raises :class:`~warden.errors.StoreUnavailable` as the store's other reads do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from warden.spend.budgets import Budget, period_key

if TYPE_CHECKING:
    from warden.store.sql import SqlStore


@dataclass(frozen=True)
class BudgetLevel:
    """One budget's current bucket: ``cap``, ``held`` (reserved, not yet settled) and
    ``remaining`` (``cap - held - settled``, never below 0), all in ``currency``."""

    budget_id: str
    currency: str
    cap: Decimal
    held: Decimal
    remaining: Decimal


def pending_approvals_by_group(store: SqlStore) -> dict[str, int]:
    """Approval tasks still ``pending``, counted by approver group (``""``: none)."""
    with store._write() as cur:  # noqa: SLF001 - same package, a short read
        cur.execute(
            "SELECT approver_group, COUNT(*) FROM tasks WHERE state = 'pending' "
            "GROUP BY approver_group"
        )
        return {str(g or ""): int(n) for g, n in cur.fetchall()}


def recent_approval_latencies(store: SqlStore, limit: int) -> list[float]:
    """Seconds from creation to the deciding (last) vote of the ``limit`` most recently
    voted approval tasks that humans decided (approved, denied, or approved and since
    consumed); expiry is no human's latency."""
    with store._write() as cur:  # noqa: SLF001 - same package, a short read
        cur.execute(
            store._q(  # noqa: SLF001
                "SELECT t.created_at, MAX(v.at) AS last_vote FROM tasks t "
                "JOIN approval_votes v ON v.task_id = t.task_id "
                "WHERE t.state IN ('approved', 'denied', 'consumed') "
                "GROUP BY t.task_id, t.created_at ORDER BY last_vote DESC LIMIT ?"
            ),
            (limit,),
        )
        rows = cur.fetchall()
    out: list[float] = []
    for created, voted in rows:
        try:
            seconds = (
                datetime.fromisoformat(str(voted)) - datetime.fromisoformat(str(created))
            ).total_seconds()
        except ValueError:
            continue  # a row in another format is not worth failing a scrape for
        out.append(max(0.0, seconds))
    return out


def budget_levels(store: SqlStore, now: datetime, limit: int) -> list[BudgetLevel]:
    """The first ``limit`` budgets by id, each with its current period's usage."""
    from warden.store.spend_sql import _BUDGET_COLUMNS, _budget

    with store._write() as cur:  # noqa: SLF001 - same package, a short read
        cur.execute(
            store._q(f"SELECT {_BUDGET_COLUMNS} FROM budgets ORDER BY budget_id LIMIT ?"),  # noqa: SLF001
            (limit,),
        )
        budgets: list[Budget] = [_budget(r) for r in cur.fetchall()]
        if not budgets:
            return []
        # Only the current bucket of each period kind: one query, bounded by `limit`.
        buckets = sorted({period_key(b.period, now) for b in budgets})
        marks = ", ".join("?" for _ in buckets)
        cur.execute(
            store._q(  # noqa: SLF001
                f"SELECT budget_id, bucket, reserved, settled FROM budget_usage "
                f"WHERE bucket IN ({marks})"
            ),
            tuple(buckets),
        )
        usage = {(r[0], r[1]): (Decimal(r[2]), Decimal(r[3])) for r in cur.fetchall()}
    levels: list[BudgetLevel] = []
    for b in budgets:
        held, settled = usage.get((b.id, period_key(b.period, now)), (Decimal(0), Decimal(0)))
        left = max(b.cap - held - settled, Decimal(0))
        levels.append(BudgetLevel(b.id, b.currency, b.cap, held, left))
    return levels


def outbox_counts(store: SqlStore) -> dict[str, int]:
    """Webhook deliveries by status (``pending``, ``sending``, ``delivered``, ``failed``)."""
    with store._write() as cur:  # noqa: SLF001 - same package, a short read
        cur.execute("SELECT status, COUNT(*) FROM webhook_deliveries GROUP BY status")
        return {str(s): int(n) for s, n in cur.fetchall()}
