"""SQL for the AdCP governance agent: plans, checks and outcomes (migration 0006), read
and written inside the caller's open write transaction (:func:`adcp_rows`).

Rows keep their record as JSON text beside the columns that are queried. Guarantees
are constraints, not reads-then-writes: a terminal outcome is inserted with
``ON CONFLICT (settles) DO NOTHING`` (one terminal settlement per governed action), a
token id (``jti``) and a consultation handle are unique. Portable SQL only (SQLite and
PostgreSQL); the meaning of each record is :mod:`warden.wire.adcp`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from warden.crypto.canonical import parse_strict_json


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _obj(text: str) -> dict[str, Any]:
    value = parse_strict_json(text)
    if not isinstance(value, dict):  # pragma: no cover - only objects are stored
        raise ValueError("an adcp record is not a JSON object")
    return value


@dataclass(frozen=True)
class PlanRow:
    """A synced plan: ``record`` is the plan as synced; ``budget_id`` its spend budget."""

    principal: str
    plan_id: str
    version: int
    status: str
    budget_id: str
    plan_hash: str
    record: dict[str, Any]
    updated_at: str


@dataclass(frozen=True)
class CheckRow:
    """A check_governance verdict (``verdict`` None while a human reviews it)."""

    check_id: str
    principal: str
    plan_id: str
    check_type: str
    verdict: str | None
    reservation_id: str | None
    task_id: str | None
    consultation_context: str | None
    jti: str | None
    record: dict[str, Any]
    created_at: str


@dataclass(frozen=True)
class OutcomeRow:
    outcome_id: str
    principal: str
    plan_id: str
    check_id: str | None
    outcome: str
    settles: str | None
    record: dict[str, Any]
    created_at: str


@dataclass(frozen=True)
class AdjustmentRow:
    adjustment_id: str
    principal: str
    plan_id: str
    outcome_id: str
    state: str
    record: dict[str, Any]
    created_at: str


_ADJ = "adjustment_id, principal, plan_id, outcome_id, state, record, created_at"
_PLAN = "principal, plan_id, version, status, budget_id, plan_hash, record, updated_at"
_CHECK = (
    "check_id, principal, plan_id, check_type, verdict, reservation_id, task_id, "
    "consultation_context, jti, record, created_at"
)
_OUTCOME = "outcome_id, principal, plan_id, check_id, outcome, settles, record, created_at"


def _plan(r: Any) -> PlanRow:
    return PlanRow(r[0], r[1], int(r[2]), r[3], r[4], r[5], _obj(r[6]), r[7])


def _check(r: Any) -> CheckRow:
    return CheckRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], _obj(r[9]), r[10])


def _outcome(r: Any) -> OutcomeRow:
    return OutcomeRow(r[0], r[1], r[2], r[3], r[4], r[5], _obj(r[6]), r[7])


def _adjustment(r: Any) -> AdjustmentRow:
    return AdjustmentRow(r[0], r[1], r[2], r[3], r[4], _obj(r[5]), r[6])


class _Adjustments:
    """report_plan_adjustment rows (mixed into :class:`SqlAdcp`)."""

    _cur: Any
    _q: Any

    def insert_adjustment(self, a: AdjustmentRow) -> None:
        self._cur.execute(
            self._q(f"INSERT INTO adcp_adjustments ({_ADJ}) VALUES (?, ?, ?, ?, ?, ?, ?)"),
            (
                a.adjustment_id,
                a.principal,
                a.plan_id,
                a.outcome_id,
                a.state,
                _dumps(a.record),
                a.created_at,
            ),
        )

    def review_adjustment(self, adjustment_id: str, state: str, record: dict[str, Any]) -> bool:
        """Move a ``reported`` adjustment to ``state``; False if it is no longer reported."""
        self._cur.execute(
            self._q(
                "UPDATE adcp_adjustments SET state = ?, record = ? "
                "WHERE adjustment_id = ? AND state = 'reported'"
            ),
            (state, _dumps(record), adjustment_id),
        )
        return bool(self._cur.rowcount == 1)

    def adjustments(self, principal: str, plan_id: str) -> list[AdjustmentRow]:
        self._cur.execute(
            self._q(
                f"SELECT {_ADJ} FROM adcp_adjustments WHERE principal = ? AND plan_id = ? "
                "ORDER BY created_at, adjustment_id"
            ),
            (principal, plan_id),
        )
        return [_adjustment(r) for r in self._cur.fetchall()]


class SqlAdcp(_Adjustments):
    """The AdCP tables on an open DB-API cursor (``q`` adapts ``?`` placeholders)."""

    def __init__(self, cur: Any, q: Any) -> None:
        self._cur = cur
        self._q = q

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        self._cur.execute(self._q(sql), params)
        return list(self._cur.fetchall())

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        self._cur.execute(self._q(sql), params)
        return self._cur.fetchone()

    # plans
    def plan(self, principal: str, plan_id: str) -> PlanRow | None:
        row = self._one(
            f"SELECT {_PLAN} FROM adcp_plans WHERE principal = ? AND plan_id = ?",
            (principal, plan_id),
        )
        return _plan(row) if row is not None else None

    def put_plan(self, p: PlanRow) -> None:
        """Insert or replace the plan (the version is the caller's to bump)."""
        self._cur.execute(
            self._q(
                f"INSERT INTO adcp_plans ({_PLAN}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (principal, plan_id) DO UPDATE SET version = excluded.version, "
                "status = excluded.status, budget_id = excluded.budget_id, "
                "plan_hash = excluded.plan_hash, record = excluded.record, "
                "updated_at = excluded.updated_at"
            ),
            (
                p.principal,
                p.plan_id,
                p.version,
                p.status,
                p.budget_id,
                p.plan_hash,
                _dumps(p.record),
                p.updated_at,
            ),
        )

    # checks
    def insert_check(self, c: CheckRow) -> None:
        # On PostgreSQL sent with the transaction's next statement: nothing reads its
        # result (:meth:`~warden.store.sql._LazyBegin.defer`, decision 701).
        (getattr(self._cur, "defer", None) or self._cur.execute)(
            self._q(f"INSERT INTO adcp_checks ({_CHECK}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            (
                c.check_id,
                c.principal,
                c.plan_id,
                c.check_type,
                c.verdict,
                c.reservation_id,
                c.task_id,
                c.consultation_context,
                c.jti,
                _dumps(c.record),
                c.created_at,
            ),
        )

    def resolve_check(
        self,
        check_id: str,
        verdict: str,
        record: dict[str, Any],
        *,
        reservation_id: str | None,
        jti: str | None,
    ) -> bool:
        """Give a check under review its verdict; False if it already has one."""
        self._cur.execute(
            self._q(
                "UPDATE adcp_checks SET verdict = ?, record = ?, reservation_id = ?, jti = ? "
                "WHERE check_id = ? AND verdict IS NULL"
            ),
            (verdict, _dumps(record), reservation_id, jti, check_id),
        )
        return bool(self._cur.rowcount == 1)

    def check(self, check_id: str) -> CheckRow | None:
        row = self._one(f"SELECT {_CHECK} FROM adcp_checks WHERE check_id = ?", (check_id,))
        return _check(row) if row is not None else None

    def check_by(self, column: str, value: str) -> CheckRow | None:
        """The check whose ``task_id``, ``jti`` or ``consultation_context`` is ``value``."""
        if column not in ("task_id", "jti", "consultation_context"):
            raise ValueError(f"not a check lookup column: {column}")
        row = self._one(f"SELECT {_CHECK} FROM adcp_checks WHERE {column} = ?", (value,))
        return _check(row) if row is not None else None

    def checks(self, principal: str, plan_id: str) -> list[CheckRow]:
        return [
            _check(r)
            for r in self._all(
                f"SELECT {_CHECK} FROM adcp_checks WHERE principal = ? AND plan_id = ? "
                "ORDER BY created_at, check_id",
                (principal, plan_id),
            )
        ]

    # outcomes
    def insert_outcome(self, o: OutcomeRow) -> bool:
        """Insert; False (nothing written) if ``settles`` already has a terminal outcome."""
        self._cur.execute(
            self._q(
                f"INSERT INTO adcp_outcomes ({_OUTCOME}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING"
            ),
            (
                o.outcome_id,
                o.principal,
                o.plan_id,
                o.check_id,
                o.outcome,
                o.settles,
                _dumps(o.record),
                o.created_at,
            ),
        )
        return bool(self._cur.rowcount == 1)

    def outcomes(self, principal: str, plan_id: str) -> list[OutcomeRow]:
        return [
            _outcome(r)
            for r in self._all(
                f"SELECT {_OUTCOME} FROM adcp_outcomes WHERE principal = ? AND plan_id = ? "
                "ORDER BY created_at, outcome_id",
                (principal, plan_id),
            )
        ]


def adcp_rows(tx: Any) -> SqlAdcp:
    """The AdCP tables inside an open store transaction (``SqlStore.transaction()``)."""
    return SqlAdcp(tx._cur, tx._q)  # noqa: SLF001 - the transaction's own cursor
