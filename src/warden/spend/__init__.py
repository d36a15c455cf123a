"""Governed spend: budgets org → team → agent, reserve → settle | release, expiry, undo.

A spend can never overspend: the cap check and the hold are one serialised
database step (see :mod:`warden.spend.engine`).

:class:`SpendEngine` loads on first use (PEP 562): it needs the ledger and the store
(SQLAlchemy), and a policy bundle, which imports :mod:`warden.spend.budgets` to check its
``spend`` section, is also loaded where no database is (``warden policy explain``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warden.spend.budgets import Budget, BudgetKind, Period
from warden.spend.errors import (
    BudgetExceeded,
    ReservationNotHeld,
    SettlementExceedsReservation,
    SpendError,
)
from warden.spend.records import HoldStatus, Receipt, Reservation

if TYPE_CHECKING:
    from warden.spend.engine import SpendEngine

__all__ = [
    "Budget",
    "BudgetExceeded",
    "BudgetKind",
    "HoldStatus",
    "Period",
    "Receipt",
    "Reservation",
    "ReservationNotHeld",
    "SettlementExceedsReservation",
    "SpendEngine",
    "SpendError",
]


def __getattr__(name: str) -> Any:
    """:class:`SpendEngine` on first use (PEP 562)."""
    if name != "SpendEngine":
        raise AttributeError(f"module 'warden.spend' has no attribute {name!r}")
    from warden.spend.engine import SpendEngine

    globals()[name] = SpendEngine
    return SpendEngine
