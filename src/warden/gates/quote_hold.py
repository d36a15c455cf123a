"""The spend quote's hold as a pipeline gate (issue 16): an allowed quote, or one a human
granted, holds its amount on the budget's path inside the quote's one transaction.

``POST /v1/quotes`` is decided by :func:`warden.spend.asks.decide_quote` with three gates
on the operation's transaction (:class:`~warden.core.pipeline.Recording`):
:class:`QuoteRoom` (a quote for a human that cannot fit is refused before it asks), the
desk ask (:class:`~warden.gates.desk.DeskAsk`), then :class:`QuoteHold`. The hold, its
``warden/spend.reserve`` entry (or the budget's ``warden/spend.refused`` entry), the
desk's task or consumed grant and the quote's ``warden/spend.policy`` entry commit
together or not at all. A budget without room tightens the verdict to a deny with
reason code ``budget_exceeded`` (as the ACS spend gate does); should a later gate deny
the step, :meth:`QuoteHold.abandon` releases the hold in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from warden.approvals.desk import Outcome
from warden.core.types import ActionRequest, Effect, Verdict
from warden.gates.desk import DeskAsk
from warden.spend.engine import SpendEngine
from warden.spend.errors import BudgetExceeded
from warden.spend.records import Reservation

log = logging.getLogger(__name__)

#: What the hold's entry records of an allowed quote's decision, built from the verdict
#: (:func:`warden.spend.asks.decided_record`).
DecidedRecord = Callable[[Verdict], dict[str, Any]]


@dataclass(frozen=True)
class HoldTerms:
    """What one quote holds: ``amount`` (> 0) of ``currency`` on ``budget_id``'s path for
    ``hold_seconds``, owned by ``principal``; ``meta`` goes on the reservation."""

    budget_id: str
    amount: Decimal
    currency: str
    action: str
    hold_seconds: int
    principal: str
    meta: dict[str, Any] = field(default_factory=dict)


class QuoteHold:
    """The gate that holds a quote's amount in the quote's transaction.

    ``engine`` is the spend engine joined to that transaction
    (:meth:`SpendEngine.within`); ``ask`` is the quote's desk ask, whose grant lets an
    ``ask``/``defer`` verdict hold (the verdict stays the policy's, decision 440);
    ``decided`` builds what the hold's entry records of an ``allow`` (a granted ask's
    decision is its ``warden/spend.policy`` entry, so its hold records none).

    After the pipeline ran: :attr:`reservation` is the hold taken, :attr:`refused` the
    budget's refusal (its ``warden/spend.refused`` entry is already written in the
    transaction), :attr:`decided_by` the verdict the hold acted on.
    """

    def __init__(
        self,
        engine: SpendEngine,
        terms: HoldTerms,
        ask: DeskAsk | None,
        decided: DecidedRecord,
    ) -> None:
        self.engine = engine
        self.terms = terms
        self.ask = ask
        self.decided = decided
        self.reservation: Reservation | None = None
        self.refused: BudgetExceeded | None = None
        self.decided_by: Verdict | None = None

    def granted(self) -> str | None:
        """The task id of the human's grant this quote consumed, or None."""
        res = self.ask.resolution if self.ask is not None else None
        if res is None or res.outcome is not Outcome.GRANTED or res.task is None:
            return None
        return str(res.task.id)

    # -- the pipeline's Gate protocol (warden.core.pipeline.Gate) ------------------

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        if self.decided_by is not None:
            return False  # held (or refused) once; a retry of the flow holds nothing more
        if verdict.decision is Effect.ALLOW:
            return True
        return verdict.decision in (Effect.ASK, Effect.DEFER) and self.granted() is not None

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        """Hold the amount (or tighten to a deny when a budget on the path has no room).
        Other errors (an unknown budget, a store failure) propagate: the pipeline tells
        every gate to give back, and the caller's transaction decides the rest."""
        t = self.terms
        meta = dict(t.meta)
        grant = self.granted()
        if grant is not None:
            meta["approval_task"] = grant
        decided = self.decided(verdict) if verdict.decision is Effect.ALLOW else None
        self.decided_by = verdict
        try:
            self.reservation = self.engine.reserve(
                t.budget_id,
                t.amount,
                t.currency,
                action=t.action,
                hold_seconds=t.hold_seconds,
                meta=meta,
                principal=t.principal,
                decided=decided,
            )
        except BudgetExceeded as exc:
            return self.refuse(verdict, exc)
        return verdict

    def refuse(self, verdict: Verdict, exc: BudgetExceeded) -> Verdict:
        """``verdict`` tightened to the budget's deny (reason code ``budget_exceeded``)."""
        self.refused = exc
        self.decided_by = verdict
        budget = exc.budget_detail()
        return Verdict(
            decision=Effect.DENY,
            reasoning=exc.message,
            reason_codes=("budget_exceeded",),
            policy_references=verdict.policy_references,
            bundle=verdict.bundle,
            policy_data={**verdict.policy_data, "budget": budget},
        )

    def holding(self) -> bool:
        return self.reservation is not None

    def abandon(self, why: str) -> None:
        """Release the hold in the quote's transaction (a later gate denied the step).
        Never raises: if the transaction is failing, the hold rolls back with it."""
        res, self.reservation = self.reservation, None
        if res is None:
            return
        try:
            self.engine.release(res.id, reason="quote_denied")
        except Exception:  # noqa: BLE001 - the transaction's own outcome decides
            log.warning("could not release hold %s (%s); it rolls back or expires", res.id, why)


class QuoteRoom:
    """The hold's deny-early check, the gate before the desk ask (decision 920): a quote
    the policy sends to a human but that a budget on its path has no room for is refused
    at once (the budget's deny, its ``warden/spend.refused`` entry), so it files no task
    and consumes no grant. It reads in the quote's transaction and holds nothing;
    :class:`QuoteHold` still checks when it holds, in that same transaction, so a
    granted quote that passed here holds (nothing between them moves money)."""

    def __init__(self, hold: QuoteHold) -> None:
        self.hold = hold

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return self.hold.decided_by is None and verdict.decision in (Effect.ASK, Effect.DEFER)

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        t = self.hold.terms
        try:
            self.hold.engine.refuse_unless_fits(t.budget_id, t.amount, t.currency, action=t.action)
        except BudgetExceeded as exc:
            return self.hold.refuse(verdict, exc)
        return verdict

    def holding(self) -> bool:
        return False

    def abandon(self, why: str) -> None:
        """Nothing to give back: the check holds nothing."""
