"""Spend records: reservations and receipts as the engine sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any


class HoldStatus(StrEnum):
    """Life of a reservation: held → settled | released | expired."""

    HELD = "held"
    SETTLED = "settled"
    RELEASED = "released"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Reservation:
    """A hold of ``amount`` against every budget on ``path`` (agent first, root last),
    each in its period bucket ``buckets[i]``; released by ``expires_at`` unless settled.

    ``principal`` is the API key principal that took the hold (the spend wire, an AdCP
    plan's owner), or None: a hold taken by ACS, or one stored before owners were
    recorded — the spend wire lets only an admin read those, and nobody conclude them.
    """

    id: str
    budget_id: str
    path: tuple[str, ...]
    buckets: tuple[str, ...]
    currency: str
    amount: Decimal
    action: str
    status: HoldStatus
    created_at: datetime
    expires_at: datetime
    settled_amount: Decimal | None = None
    receipt_id: str | None = None
    reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    principal: str | None = None


@dataclass(frozen=True)
class Receipt:
    """A settled spend: what was charged, and whether it was undone. ``principal`` is its
    reservation's (None: owned by nobody, see :class:`Reservation`)."""

    id: str
    reservation_id: str
    budget_id: str
    action: str
    currency: str
    amount: Decimal
    created_at: datetime
    undone_at: datetime | None = None
    resources: tuple[dict[str, str], ...] = ()
    principal: str | None = None
