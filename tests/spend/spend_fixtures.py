"""Helpers for spend tests: an engine on a real SQLite file with a movable clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from conftest import TEST_IKM

from warden.crypto.hmac_keys import SessionKeys
from warden.ledger.ledger import Ledger
from warden.ledger.verify import VerifyReport, verify_records
from warden.spend import Budget, BudgetKind, Period, SpendEngine
from warden.spend.audit import SpendAuditor
from warden.store import open_store
from warden.store.sql import SqlStore

#: Every store open_engine opened; tests/spend/conftest.py closes them after each test
#: (a PostgreSQL connection left to the garbage collector warns, and warnings fail tests).
OPENED: list[SqlStore] = []


def close_opened() -> None:
    while OPENED:
        OPENED.pop().close()


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 11, 29, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


def open_engine(db: Path | str, clock: Clock | None = None) -> tuple[SpendEngine, SqlStore, Clock]:
    """An engine on ``db``: a SQLite file path, or any database URL."""
    clock = clock or Clock()
    store = open_store(db if isinstance(db, str) else f"sqlite:///{db}")
    OPENED.append(store)
    ledger = Ledger(store, SessionKeys(TEST_IKM), "warden")
    return SpendEngine(store, SpendAuditor(ledger, clock), clock=clock), store, clock


def tree(
    engine: SpendEngine,
    *,
    org: str = "100",
    team: str = "60",
    agent: str = "50",
    currency: str = "USD",
    period: Period = Period.NONE,
) -> str:
    """org ⊃ team ⊃ agent budgets; returns the agent budget id."""
    engine.define_budget(Budget("acme", BudgetKind.ORG, currency, Decimal(org), period))
    engine.define_budget(
        Budget("acme.ops", BudgetKind.TEAM, currency, Decimal(team), period, parent_id="acme")
    )
    engine.define_budget(
        Budget(
            "acme.ops.bot", BudgetKind.AGENT, currency, Decimal(agent), period, parent_id="acme.ops"
        )
    )
    return "acme.ops.bot"


def verify(store: SqlStore) -> VerifyReport:
    return verify_records(store.iter_records(), ikm=TEST_IKM)
