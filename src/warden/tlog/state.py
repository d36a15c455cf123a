"""Rebuild state from the log's events and compare it with the tables (issue 17).

:func:`check_state` is ``warden verify``'s last step over a database: the state the
verified events imply (:mod:`warden.tlog.state_rebuild`: API keys, agents and their
keys, approval tasks and votes, budgets, usage, holds and receipts) against every row of
those tables. It raises :class:`~warden.tlog.audit.LogProblem` (``state_mismatch``) at
the first row that disagrees, carrying every disagreeing row in ``details``, and
returns the rows checked per table when all agree.
"""

from __future__ import annotations

from sqlalchemy import Engine

from warden.tlog.audit import LogProblem
from warden.tlog.state_rebuild import MAX_LISTED, check


def check_state(engine: Engine) -> dict[str, int]:
    """Rows checked per table; LogProblem(``state_mismatch``) naming the first row the
    events contradict (and the leaf that last set it, or none) and listing them all."""
    report = check(engine)
    if report.mismatches:
        first = report.mismatches[0]
        more = len(report.mismatches) - 1
        raise LogProblem(
            "state_mismatch",
            first.message + (f" (and {more} more row(s) disagree)" if more else ""),
            first.index,
            details=[m.as_dict() for m in report.mismatches[:MAX_LISTED]],
        )
    return report.rows
