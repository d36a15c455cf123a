"""Budgets: a cap in one currency over a period, arranged org → team → agent.

A spend reserves against every budget on the path from the agent's budget to
its root; it is admitted only if it fits under each cap for the current period.
Periods roll at UTC boundaries: ``day`` at 00:00 UTC, ``month`` on the 1st,
``none`` never.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from warden.errors import InputRejected
from warden.spend.binding import is_bound, normalized, principals_problems

_BUDGET_ID = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")


class Period(StrEnum):
    """How often a budget's usage resets (UTC)."""

    DAY = "day"
    MONTH = "month"
    NONE = "none"


class BudgetKind(StrEnum):
    """The level of a budget in the hierarchy."""

    ORG = "org"
    TEAM = "team"
    AGENT = "agent"


_PARENT_KIND = {BudgetKind.TEAM: BudgetKind.ORG, BudgetKind.AGENT: BudgetKind.TEAM}


class BudgetError(InputRejected):
    """A budget definition Warden refuses."""

    reason = "invalid_budget"


@dataclass(frozen=True)
class Budget:
    """One budget: ``cap`` in ``currency`` per ``period``; ``parent_id`` None for an org.

    ``principals`` (sorted, deduplicated) are the principals and ``group:<name>`` entries
    that may spend it on the spend wire (:mod:`warden.spend.binding`); empty: nobody.
    """

    id: str
    kind: BudgetKind
    currency: str
    cap: Decimal
    period: Period
    parent_id: str | None = None
    name: str = ""
    principals: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # One stored form (sorted, unique), so equal bindings compare and upsert equal;
        # anything else is left for validate() to refuse.
        if isinstance(self.principals, list | tuple) and all(
            isinstance(p, str) for p in self.principals
        ):
            object.__setattr__(self, "principals", normalized(self.principals))

    def spendable_by(self, principal: str, groups: tuple[str, ...]) -> bool:
        """True if a caller ``principal`` with API key ``groups`` is bound to this budget."""
        return is_bound(self.principals, principal, groups)

    def validate(self, parent: Budget | None) -> None:
        """Raise :class:`BudgetError` unless this budget can sit under ``parent`` and its
        ``principals`` are valid."""
        if not _BUDGET_ID.match(self.id):
            raise BudgetError(f"budget id {self.id!r} must match {_BUDGET_ID.pattern}")
        if problems := principals_problems(self.principals):
            raise BudgetError(f"budget {self.id}: " + "; ".join(problems))
        if self.kind is BudgetKind.ORG:
            if self.parent_id is not None:
                raise BudgetError(f"org budget {self.id} cannot have a parent")
            return
        if parent is None:
            raise BudgetError(
                f"{self.kind.value} budget {self.id} needs an existing parent "
                f"{_PARENT_KIND[self.kind].value} budget"
            )
        if parent.kind is not _PARENT_KIND[self.kind]:
            raise BudgetError(
                f"{self.kind.value} budget {self.id} needs a parent of kind "
                f"{_PARENT_KIND[self.kind].value}, not {parent.kind.value} budget {parent.id}"
            )
        if parent.currency != self.currency:
            raise BudgetError(
                f"budget {self.id} is in {self.currency} but its parent "
                f"{parent.id} is in {parent.currency}: currencies never mix"
            )


#: The prefix of the budgets AdCP's ``sync_plans`` creates
#: (:func:`warden.adcp.state.budget_id_for`).
ADCP_BUDGET_PREFIX = "adcp:"


def adcp_budget_problem(budget_id: str, what: str) -> str | None:
    """Why ``what`` (a spend charge, off AdCP) may not name ``budget_id``: an ``adcp:``
    budget is an AdCP plan's, spent only through ``check_governance`` with its flight,
    seller and review gates (decisions 923, 940, 974); None when it is not one."""
    if not budget_id.startswith(ADCP_BUDGET_PREFIX):
        return None
    return (
        f"{what} names budget {budget_id!r:.80}, an AdCP plan's budget: budgets in the "
        f"{ADCP_BUDGET_PREFIX} namespace are AdCP's alone (check_governance spends them), "
        "so no policy charge may spend one"
    )


def budget_id_problem(budget_id: object) -> str | None:
    """Why ``budget_id`` cannot name a budget, or None when it can."""
    if not isinstance(budget_id, str) or not _BUDGET_ID.match(budget_id):
        return f"budget id {budget_id!r} must match {_BUDGET_ID.pattern}"
    return None


def period_key(period: Period, at: datetime) -> str:
    """The usage bucket of ``at`` (UTC): ``2026-11-29``, ``2026-11`` or ``all``."""
    at = at.astimezone(UTC)
    if period is Period.DAY:
        return at.strftime("%Y-%m-%d")
    if period is Period.MONTH:
        return at.strftime("%Y-%m")
    return "all"


def period_end(period: Period, at: datetime) -> datetime | None:
    """When the bucket of ``at`` ends (exclusive, UTC), or None for ``none``."""
    at = at.astimezone(UTC)
    if period is Period.DAY:
        return datetime(at.year, at.month, at.day, tzinfo=UTC) + timedelta(days=1)
    if period is Period.MONTH:
        year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
        return datetime(year, month, 1, tzinfo=UTC)
    return None
