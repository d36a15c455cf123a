"""The spend gate: a tool call the bundle prices reserves its cost before it is allowed.

Issue 3 item 6, "the same budgets govern ACS"; the bundle's ``spend`` section is
documented in docs/policy-bundles.md ("Spend"). For a ``steps/toolCallRequest`` (or a
wrapped MCP ``tools/call``) whose policy verdict is allow or modify and which a charge
of the bundle prices, the gate reserves the declared maximum cost with
:meth:`SpendEngine.reserve <warden.spend.engine.SpendEngine.reserve>` — the cap check
and the hold are one serialised step, so concurrent calls never overspend — before the
answer is signed. A call that does not fit becomes a deny with reason code
``budget_exceeded`` and ``policy_data.budget``; a call that cannot be priced, a deny
saying why. The ``steps/toolCallResult`` whose ``request_id_ref`` names the reserved
request settles the hold (``success``) or releases it (``failure``, ``timeout``,
``blocked``); a hold never concluded expires at its ``hold_seconds``.

What the gate did goes into the step's hashed entry (``verdict.spend``) and, for the
agent, into ``policy_data``. Ordering (docs/decisions.md, "Spend"): the reservation
commits in its own transaction, before the entry that records it; when that entry then
fails to commit, :meth:`SpendStep.abandon` releases the hold, and a crash between the
two leaves the hold to expire.

Whom a call may charge is the bundle's choice: a fixed ``budget``, or ``budget_expr``
over the verified identity only (``agent.id``, ``agent.budgets``, ``session.agent_id``,
which is bound to the registered agent, and ``data``; issue 15 item 5), never over a
field the agent writes. A budget's ``principals`` binding governs the spend wire; the
holds taken here are owned by no principal, so no API key can conclude them on ``/v1``
(docs/decisions.md, "Hardening (issue 14): spend ownership", item 162).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from warden.core.tool_names import fold
from warden.core.types import ActionRequest, Effect, Verdict
from warden.policy.bundle import TOOL_METHODS, Bundle, Charge
from warden.policy.conditions import ConditionError, ContextPool
from warden.policy.engine import facts_for
from warden.spend.budgets import adcp_budget_problem, budget_id_problem
from warden.spend.engine import SpendEngine
from warden.spend.errors import (
    BudgetExceeded,
    ReservationNotHeld,
    SettlementExceedsReservation,
    UnknownBudget,
    UnknownReservation,
)
from warden.spend.money import MoneyError, parse_amount, parse_currency, to_wire
from warden.spend.records import HoldStatus, Reservation

log = logging.getLogger(__name__)

RESULT_METHOD = "steps/toolCallResult"
FAIL_CLOSED_REASONING = (
    "Warden could not determine what this call costs, so it is denied (fail closed)."
)

#: The committed entry of request ``step_id`` in session ``session_id``, or None
#: (``SqlStore.step_entry``): a result finds its request's reservation in the chain.
EntryFinder = Callable[[str, str], dict[str, Any] | None]


def to_amount(value: Any, *, field: str = "amount", allow_zero: bool = False) -> Decimal:
    """A CEL result as a Decimal amount: a decimal string, an integer, or a double read as
    its shortest decimal form (``98.7`` → ``Decimal("98.7")``), at most 6 fractional
    digits. Raises :class:`MoneyError` otherwise (see :func:`parse_amount`)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MoneyError(f"{field} must be finite", field=field)
        value = Decimal(repr(value))
    return parse_amount(value, field=field, allow_zero=allow_zero)


@dataclass(frozen=True)
class Price:
    """What a call costs and whom it charges, per the first charge that applied."""

    charge: Charge
    amount: Decimal
    currency: str
    budget_id: str


@dataclass(frozen=True)
class Unpriced:
    """A priced call whose cost could not be determined: denied with ``reason``.

    ``reasoning`` goes on the wire; ``failure`` (operator detail) only to the ledger.
    """

    charge: Charge
    reason: str
    reasoning: str
    failure: str | None = None


class SpendGate:
    """Prices tool calls with a bundle's ``spend`` charges and holds their cost in a
    :class:`SpendEngine`. Thread-safe (the engine's store serialises holds)."""

    def __init__(self, engine: SpendEngine, bundle: Bundle, find_entry: EntryFinder) -> None:
        self.engine = engine
        self.charges = bundle.charges
        self._find_entry = find_entry
        self._contexts = ContextPool(bundle.data)
        self._by_id = {c.id: c for c in bundle.charges}
        request_side = {
            c.id: [
                e for e in (c.condition, c.amount, c.currency_expr, c.budget_expr) if e is not None
            ]
            for c in bundle.charges
        }
        self._uses_cel = frozenset(cid for cid, exprs in request_side.items() if exprs)
        self._variables = {
            cid: frozenset(v for e in exprs for v in e.variables)
            for cid, exprs in request_side.items()
        }

    @classmethod
    def for_bundle(
        cls, engine: SpendEngine, bundle: Bundle, find_entry: EntryFinder
    ) -> SpendGate | None:
        """The gate for ``bundle``, or None when it prices nothing (no ``spend`` section)."""
        return cls(engine, bundle, find_entry) if bundle.charges else None

    def step(
        self, session_id: str, request_id: str, *, is_replay: Callable[[], bool] | None = None
    ) -> SpendStep:
        """The gate's part in one ACS step (see :class:`SpendStep`). ``is_replay`` tells
        whether the request's replay keys were already seen: a replay holds nothing
        (its commit is refused with -32005 anyway)."""
        return SpendStep(self, session_id, request_id, is_replay or (lambda: False))

    # -- pricing -------------------------------------------------------------------

    def price(self, request: ActionRequest) -> Price | Unpriced | None:
        """Price a tool call with the first charge (bundle order) whose ``tools`` and
        ``when`` match; None when no charge applies. Never raises for request content."""
        if request.method not in TOOL_METHODS:
            return None
        candidates = [c for c in self.charges if c.matches_tool(request.tool_name)]
        if not candidates:
            return None
        names = frozenset().union(*(self._variables[c.id] for c in candidates))
        ctx: Any = None
        for charge in candidates:
            where = "when"
            try:
                if ctx is None and charge.id in self._uses_cel:
                    ctx = self._contexts.for_request(facts_for(request, names))
                if charge.condition is not None and not charge.condition.evaluate(ctx):
                    continue
                where = "amount"
                if charge.price is not None:
                    amount = charge.price
                elif charge.prices:
                    listed = charge.price_for(request.tool_name)  # caseless, as matches_tool
                    assert listed is not None
                    amount = listed
                else:
                    assert charge.amount is not None
                    amount = to_amount(charge.amount.value(ctx))
                where = "currency"
                currency = (
                    charge.currency
                    if charge.currency is not None
                    else parse_currency(_value(charge.currency_expr, ctx))
                )
                where = "budget"
                budget_id = (
                    charge.budget if charge.budget is not None else _value(charge.budget_expr, ctx)
                )
                why = budget_id_problem(budget_id) or adcp_budget_problem(
                    str(budget_id), f"charge {charge.id}"
                )  # the second: decision 974, for an id computed from the request
                if why is not None:
                    return Unpriced(
                        charge, "invalid_budget", f"This call is charged to no valid budget: {why}."
                    )
            except ConditionError as exc:
                detail = f"charge {charge.id}: {where}: {exc}"
                log.warning("spend gate fails closed: %s", detail)
                return Unpriced(charge, "evaluation_failed", FAIL_CLOSED_REASONING, detail)
            except MoneyError as exc:
                return Unpriced(
                    charge, exc.reason, f"This call's cost cannot be used: {exc.message}."
                )
            return Price(charge, amount, currency, str(budget_id))
        return None

    # -- results -------------------------------------------------------------------

    def conclude(self, session_id: str, request: ActionRequest) -> dict[str, Any] | None:
        """Settle or release the hold of the request a ``steps/toolCallResult`` answers
        (``request_id_ref``, looked up in this session's chain); the record for the
        result's entry, or None when that request holds nothing.

        Only a result for a tool some charge prices is looked up: the others cost no
        read (a read waits for the store's writer, which group commits hold)."""
        ref = request.payload.get("request_id_ref")
        if not isinstance(ref, str):
            return None
        if not any(c.matches_tool(request.tool_name) for c in self.charges):
            return None
        entry = self._find_entry(session_id, ref)
        spend = (entry or {}).get("verdict", {}).get("spend")
        rid = spend.get("reservation_id") if isinstance(spend, dict) else None
        if not isinstance(rid, str):
            return None
        record: dict[str, Any] = {"reservation_id": rid}
        try:
            res = self.engine.reservation(rid)  # expires it first if it is due
        except UnknownReservation:
            log.warning("entry %s of session %s names unknown reservation %s", ref, session_id, rid)
            return {**record, "outcome": "unknown_reservation"}
        if res.meta.get("session_id") != session_id or res.meta.get("request_id") != ref:
            log.warning("reservation %s does not belong to %s/%s", rid, session_id, ref)
            return {**record, "outcome": "not_this_request"}
        record.update(budget_id=res.budget_id, currency=res.currency, reserved=to_wire(res.amount))
        if res.status is not HoldStatus.HELD:
            return {**record, "outcome": "not_held", "status": res.status.value}
        status = str(request.payload.get("exit_status", ""))
        try:
            if status == "success":
                return {**record, **self._settle(res, request)}
            released = self.engine.release(rid, reason=f"tool_{status}")
            return {**record, "outcome": "released", "reason": released.reason}
        except ReservationNotHeld as exc:  # concluded or expired since it was read
            return {**record, "outcome": "not_held", "status": exc.status}

    def _settle(self, res: Reservation, request: ActionRequest) -> dict[str, Any]:
        """Settle at the charge's ``actual`` (if declared and usable) or the reserved
        amount; more than reserved is refused by the engine, flagged, and settled at the
        reserved amount (the budget then counts the most that was admitted)."""
        out: dict[str, Any] = {"outcome": "settled"}
        actual = res.amount
        charge = self._by_id.get(str(res.meta.get("charge", "")))
        if charge is not None and charge.actual is not None:
            try:
                facts = _result_facts(request, res, charge.actual.variables)
                value = charge.actual.value(self._contexts.for_request(facts))
                actual = to_amount(value, field="actual", allow_zero=True)
            except (ConditionError, MoneyError) as exc:
                log.warning(
                    "charge %s: actual unusable, reserved amount settled: %s", charge.id, exc
                )
                out["flagged"] = "actual_invalid"
        try:
            receipt = self.engine.settle(res.id, actual)
        except SettlementExceedsReservation:
            out.update(flagged="settlement_exceeds_reservation", claimed=to_wire(actual))
            receipt = self.engine.settle(res.id, res.amount)
        return {**out, "amount": to_wire(receipt.amount), "receipt_id": receipt.id}


class SpendStep:
    """The spend gate's part in one ACS step, across the dispatch's commit attempts.

    :meth:`apply` is called once per decision attempt: on a tool call it (re)reserves,
    releasing the hold of an earlier attempt first; on a result it settles or releases
    once and returns the same record on a retry. :meth:`abandon` releases the hold when
    the entry that records it was not committed.
    """

    def __init__(
        self, gate: SpendGate, session_id: str, request_id: str, is_replay: Callable[[], bool]
    ) -> None:
        self._gate = gate
        self.session_id = session_id
        self.request_id = request_id
        self._is_replay = is_replay
        self._held: str | None = None
        self._concluded = False
        self.result_record: dict[str, Any] | None = None

    @property
    def held(self) -> str | None:
        """The reservation id this step holds (not yet known to be committed), if any."""
        return self._held

    # -- the pipeline's Gate protocol (warden.core.pipeline.Gate) ------------------

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return True

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return self.touches_store(request, verdict)

    def holding(self) -> bool:
        return self._held is not None

    def touches_store(self, request: ActionRequest, verdict: Verdict) -> bool:
        """Whether :meth:`apply` may read or write the store for this verdict (the
        caller then runs it off its event loop); False means it returns at once."""
        if self._held is not None:
            return True
        priced = any(c.matches_tool(request.tool_name) for c in self._gate.charges)
        if request.method in TOOL_METHODS:
            return priced and verdict.decision in (Effect.ALLOW, Effect.MODIFY)
        if request.method == RESULT_METHOD:
            return priced and not self._concluded and "request_id_ref" in request.payload
        return False

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        """The verdict after the gate: unchanged, tightened to a deny, or carrying the
        reservation / settlement in ``spend`` and ``policy_data``."""
        if request.method in TOOL_METHODS:
            self.abandon()
            return self._admit(request, verdict)
        if request.method == RESULT_METHOD:
            if not self._concluded:
                self.result_record = self._gate.conclude(self.session_id, request)
                self._concluded = True
            if self.result_record is None:
                return verdict
            return replace(
                verdict,
                spend=self.result_record,
                policy_data={**verdict.policy_data, "spend": self.result_record},
            )
        return verdict

    def abandon(self, why: str = "entry_not_committed") -> None:
        """Release the hold taken for an entry that was not committed (``why`` is for the
        log; the release's recorded reason is ``entry_not_committed``). Never raises: a
        hold that cannot be released now expires at its ``hold_seconds``."""
        rid, self._held = self._held, None
        if rid is None:
            return
        try:
            self._gate.engine.release(rid, reason="entry_not_committed")
        except Exception:  # noqa: BLE001 - expiry is the backstop; the caller's error matters
            log.exception("could not release hold %s; it expires at its hold time", rid)

    def _admit(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        if verdict.decision not in (Effect.ALLOW, Effect.MODIFY):
            return verdict
        priced = self._gate.price(_as_executed(request, verdict))
        if priced is None:
            return verdict
        if isinstance(priced, Unpriced):
            detail = {"charge": priced.charge.id, "refused": priced.reason}
            return _deny(
                verdict,
                priced.reason,
                priced.reasoning,
                {"spend": detail},
                detail,
                failure=priced.failure,
            )
        if self._is_replay():
            return verdict  # the commit refuses it (-32005): hold nothing for a replay
        base = {
            "charge": priced.charge.id,
            "budget_id": priced.budget_id,
            "amount": to_wire(priced.amount),
            "currency": priced.currency,
        }
        try:
            res = self._gate.engine.reserve(
                priced.budget_id,
                priced.amount,
                priced.currency,
                action=f"acs:{request.tool_name}",
                hold_seconds=priced.charge.hold_seconds,
                meta={
                    "wire": "acs",
                    "session_id": self.session_id,
                    "request_id": self.request_id,
                    "tool": request.tool_name,
                    "charge": priced.charge.id,
                },
            )
        except BudgetExceeded as exc:
            budget = {**exc.budget_detail(), "charge": priced.charge.id}
            refused = {
                **base,
                "refused": "budget_exceeded",
                "blocking_budget_id": exc.budget_id,
                "limit": budget["limit"],
                "available": budget["available"],
            }
            reasoning = (
                f"This call costs {base['amount']} {priced.currency}, more than budget "
                f"{exc.budget_id} has left ({budget['available']} of {budget['limit']} "
                f"{exc.currency})."
            )
            return _deny(verdict, "budget_exceeded", reasoning, {"budget": budget}, refused)
        except (UnknownBudget, MoneyError) as exc:
            refused = {**base, "refused": exc.reason}
            reasoning = f"This call cannot be charged to budget {priced.budget_id}: {exc.message}."
            return _deny(verdict, exc.reason, reasoning, {"spend": refused}, refused)
        self._held = res.id
        held = {
            "charge": priced.charge.id,
            "reservation_id": res.id,
            "budget_id": res.budget_id,
            "amount": to_wire(res.amount),
            "currency": res.currency,
            "expires_at": res.expires_at.isoformat(),
        }
        return replace(verdict, spend=held, policy_data={**verdict.policy_data, "spend": held})


def _value(expr: Any, ctx: Any) -> Any:
    assert expr is not None
    return expr.value(ctx)


def _as_executed(request: ActionRequest, verdict: Verdict) -> ActionRequest:
    """The call as it will run: arguments after a modify verdict's ``parameter_overrides``."""
    overrides = (verdict.modifications or {}).get("parameter_overrides")
    if not overrides:
        return request
    return replace(request, args={**request.args, **overrides})


def _result_facts(
    request: ActionRequest, res: Reservation, names: frozenset[str]
) -> dict[str, Any]:
    """The variables an ``actual`` expression reads (docs/policy-bundles.md, "Spend")."""
    payload = request.payload
    facts: dict[str, Callable[[], Any]] = {
        "method": lambda: request.method,
        "tool": lambda: {**request.tool, "normalized_name": fold(request.tool_name)},
        "outputs": lambda: [o.get("value") for o in payload.get("outputs", [])],
        "exit_status": lambda: payload.get("exit_status", ""),
        "reserved": lambda: to_wire(res.amount),
        "payload": lambda: payload,
        "metadata": lambda: request.metadata,
        "session": lambda: request.session,
        "agent": lambda: request.agent,
        "claims": lambda: request.claims,
    }
    return {n: facts[n]() for n in names if n in facts}


def _deny(
    verdict: Verdict,
    reason: str,
    reasoning: str,
    policy_data: dict[str, Any],
    spend: dict[str, Any],
    *,
    failure: str | None = None,
) -> Verdict:
    """The policy's allow/modify tightened to a deny by the gate (rules stay cited)."""
    return Verdict(
        decision=Effect.DENY,
        reasoning=reasoning,
        reason_codes=(reason,),
        policy_references=verdict.policy_references,
        bundle=verdict.bundle,
        policy_data={**verdict.policy_data, **policy_data},
        failure=failure,
        spend=spend,
    )
