"""Governed spend: budgets org → team → agent, reserve → settle | release, expiry, undo.

A spend can never overspend: the cap check and the hold are one serialised
database step (see :mod:`warden.spend.engine`).
"""

from warden.spend.budgets import Budget, BudgetKind, Period
from warden.spend.engine import SpendEngine
from warden.spend.errors import (
    BudgetExceeded,
    ReservationNotHeld,
    SettlementExceedsReservation,
    SpendError,
)
from warden.spend.records import HoldStatus, Receipt, Reservation

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
