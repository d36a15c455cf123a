"""The webhook outbox's row types (``webhook_deliveries``, migration 0004).

They live in the storage layer so that the store never imports the approval desk
(:mod:`warden.approvals.notifier` fills and drains the outbox through these types).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum


def rfc3339(moment: datetime) -> str:
    """``moment`` as RFC 3339 UTC text with microseconds and ``+00:00`` (fixed width, so
    text order is time order). Raises ``ValueError`` for a naive datetime."""
    if moment.tzinfo is None:
        raise ValueError("a naive datetime has no defined UTC instant")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True)
class Delivery:
    """One outbox row (``webhook_deliveries``, migration 0004).

    ``body`` is the exact text sent (UTF-8 on the wire). ``attempts`` counts claims
    (a claim is an attempt, so a worker that dies mid-send still uses one up).
    ``next_attempt_at`` is when a pending row is due; ``lease_until`` when a
    ``sending`` row may be reclaimed. ``last_error`` is the latest failed attempt's
    reason, ``response_status`` the latest HTTP status received. Times are aware UTC.
    """

    delivery_id: str
    webhook_id: str
    task_id: str
    event: str
    url: str
    body: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    lease_until: datetime | None = None
    last_error: str | None = None
    response_status: int | None = None
    delivered_at: datetime | None = None
