"""Campaign plans as the governance agent reads them (AdCP ``sync_plans``,
specs/adcp-spend-kla.md §1.6 "Plan").

A :class:`Plan` is built only from a ``plans[]`` item that already validated against
``governance/sync-plans-request.json``; it keeps the item as synced (``record``) and the
fields the verdict rules read, amounts as :class:`~decimal.Decimal`. Nothing here
touches storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

#: ``policy_categories`` that force human review (sync-plans-request.json's allOf).
REVIEW_CATEGORIES = frozenset(
    {"fair_housing", "fair_lending", "fair_employment", "pharmaceutical_advertising"}
)


def to_decimal(value: Any) -> Decimal:
    """A JSON number as an exact Decimal (floats through their shortest repr)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise TypeError(f"not a number: {value!r}")
    return value if isinstance(value, Decimal) else Decimal(repr(value))


def parse_time(value: str) -> datetime:
    """An RFC 3339 date-time (``Z`` or an offset) as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Plan:
    """One synced plan: budget ``total`` in ``currency``, the flight, and its rules.

    ``reallocation_threshold`` is None when the plan allows unlimited reallocation;
    ``must_policies`` are the plan's ``custom_policies`` with ``enforcement: must``
    (each ``{policy_id, policy, …}``); ``approved_sellers`` None means any seller.
    """

    plan_id: str
    record: dict[str, Any]
    total: Decimal
    currency: str
    flight_start: datetime
    flight_end: datetime
    reallocation_threshold: Decimal | None
    human_review_required: bool
    countries: tuple[str, ...]
    approved_sellers: tuple[str, ...] | None
    must_policies: tuple[dict[str, Any], ...]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Plan:
        """The plan of a schema-valid ``plans[]`` item."""
        budget = record["budget"]
        threshold = budget.get("reallocation_threshold")
        sellers = record.get("approved_sellers")
        categories = set(record.get("policy_categories") or ())
        policies = tuple(
            p for p in record.get("custom_policies") or () if p.get("enforcement") == "must"
        )
        review = bool(record.get("human_review_required")) or bool(categories & REVIEW_CATEGORIES)
        review = review or any(p.get("requires_human_review") for p in policies)
        return cls(
            plan_id=record["plan_id"],
            record=record,
            total=to_decimal(budget["total"]),
            currency=str(budget["currency"]),
            flight_start=parse_time(record["flight"]["start"]),
            flight_end=parse_time(record["flight"]["end"]),
            reallocation_threshold=None if threshold is None else to_decimal(threshold),
            human_review_required=review,
            countries=tuple(record.get("countries") or ()),
            approved_sellers=None if sellers is None else tuple(sellers),
            must_policies=policies,
        )
