"""What each spend wire route does: one store transaction per request, the engine
joined to it (:meth:`SpendEngine.within <warden.spend.engine.SpendEngine.within>`), the
wire's own checks (USD only) and the rendered answer.

A mutation runs in one transaction with its Idempotency-Key claim and stored answer
(:meth:`SpendWire.mutate`; docs/decisions.md, "Governed spend wire"). No policy and no
hold lives here: a quote is decided and held by the pipeline and its gates
(:func:`warden.spend.asks.decide_quote`); the engine decides whether a spend fits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from fastapi.responses import Response

from warden.approvals.desk import ApprovalDesk, DeskTx, Outcome, with_reasoning
from warden.core.guardian import Guardian
from warden.core.pipeline import Pipeline
from warden.core.types import Effect as VerdictEffect
from warden.errors import CouldNotDecide, WardenError
from warden.identity.api_keys import LiveCheckTx, Role
from warden.ledger.warden_chain import chained_attempts
from warden.spend.asks import (
    BUDGET_APPROVERS,
    QuoteDecision,
    budget_increase_ask,
    decide_quote,
    file_budget_increase,
    winning_gate,
)
from warden.spend.audit import spend_session_id
from warden.spend.budgets import Budget, period_key
from warden.spend.engine import DEFAULT_HOLD_SECONDS, SpendEngine, SpendTx
from warden.spend.money import parse_amount, to_wire
from warden.spend.ownership import (
    concludable_reservation,
    may_read_budget,
    not_managed_elsewhere,
    readable_path,
    readable_receipt,
    readable_reservation,
    spendable_path,
    undoable_receipt,
)
from warden.store.idempotency import Idempotency, IdempotencyKeys, request_hash
from warden.wire.spend.auth import KeyAuth, caller, key_check, unauthenticated
from warden.wire.spend.models import (
    BudgetData,
    BudgetDefineData,
    BudgetDefinition,
    BudgetIncreaseRequest,
    BudgetListData,
    BudgetView,
    CommitData,
    CommitRequest,
    Quote,
    QuoteData,
    QuoteRequest,
    ReasonRequest,
    ReceiptData,
    ReleaseData,
    ReservationData,
    ReservationRef,
    Resolution,
    Resource,
    TaskData,
    UndoData,
)
from warden.wire.spend.render import (
    CURRENCY,
    IRREVERSIBLE,
    Refusal,
    budget_exceeded,
    budget_view,
    currency_not_supported,
    dump,
    invalid,
    json_response,
    receipt,
    reservation_view,
    retry,
    rfc3339,
    success,
    task_view,
    to_bytes,
    undo_command,
    usd,
    warden_resource,
)


class WireTx(SpendTx, DeskTx, LiveCheckTx, Protocol):
    """One store write transaction as the spend wire uses it."""

    @property
    def idempotency_keys(self) -> IdempotencyKeys: ...

    def after_commit(self, report: Callable[[], None]) -> None: ...

    def prefetch(
        self,
        *,
        budgets: tuple[str, ...] = (),
        chains: tuple[str, ...] = (),
        usage: tuple[tuple[str, str], ...] = (),
        heads: tuple[str, ...] = (),
    ) -> None:
        """Reads to send with the transaction's ``BEGIN`` (a hint; see the store)."""


class WireStore(Protocol):
    """The store behind the spend wire (``SqlStore``)."""

    def spend_transaction(self, *, unlocked_heads: bool = ...) -> AbstractContextManager[WireTx]:
        """``unlocked_heads``: may chain on heads read without a lock (decision 800)."""

    def budgets(self) -> list[Budget]: ...


@dataclass(frozen=True)
class Answer:
    """A rendered answer: HTTP status and envelope."""

    status: int
    body: dict[str, Any]


Effect = Callable[[WireTx, SpendEngine], Answer]


class SpendWire:
    """The routes' shared state: engine, store, token check, idempotency rules."""

    def __init__(
        self,
        engine: SpendEngine,
        store: WireStore,
        auth: KeyAuth,
        idempotency: Idempotency,
        max_body_bytes: int,
        guardian: Guardian,
        desk: ApprovalDesk | None = None,
    ) -> None:
        self.guardian = guardian
        self.pipeline = Pipeline(guardian)
        self.desk = desk
        self.engine = engine
        self.store = store
        self.auth = auth
        self.idempotency = idempotency
        self.max_body_bytes = max_body_bytes
        #: budget id → the ids of its path (the budget, then its ancestors), as the last
        #: quote against it read them: what the next quote's transaction reads first.
        self._paths: dict[str, tuple[str, ...]] = {}

    # -- the mutation step ------------------------------------------------------------

    def mutate(
        self,
        route: str,
        path: dict[str, str],
        body: Any,
        key: str | None,
        effect: Effect,
        prefetch: Callable[[WireTx], None] | None = None,
    ) -> Response:
        """Run ``effect`` once per Idempotency-Key, in one transaction with the key's claim
        and its stored answer. A refusal is raised after the transaction commits (its
        audit entry is kept; its claim is released: errors are never cached).
        ``prefetch`` names the reads the effect will make (sent with ``BEGIN``)."""
        scope = f"{caller().principal} {route}"
        req_hash = request_hash({"path": path, "body": body})  # validates the JCS domain

        def attempt(unlocked: bool) -> Response:
            refusal: WardenError | None = None
            live = key_check()
            with self.store.spend_transaction(unlocked_heads=unlocked) as tx:
                if live is not None:
                    live.prefetch(tx)
                if prefetch is not None:
                    prefetch(tx)
                # A key answered from memory changes and answers nothing unless it is still
                # live, read in this transaction (decision 702).
                stored = None
                try:
                    if key is not None:
                        stored = self.idempotency.begin(tx.idempotency_keys, scope, key, req_hash)
                except WardenError:
                    if live is not None and not live.confirm(tx):
                        raise unauthenticated("Bearer") from None  # the key's answer comes first
                    raise
                if live is not None and not live.confirm(tx):
                    raise unauthenticated("Bearer")
                if stored is not None:
                    replay = json.loads(stored.body)
                    replay["replayed"] = True
                    return json_response(stored.status_code, replay)
                try:
                    answer = effect(tx, self.engine.within(tx))
                except CouldNotDecide:
                    raise  # the store failed: roll everything back
                except WardenError as exc:  # a refusal: keep its audit entry, cache nothing
                    refusal = exc
                if refusal is not None:
                    if key is not None:
                        self.idempotency.abandon(tx.idempotency_keys, scope, key)
                else:
                    text = to_bytes(answer.body)
                    if key is not None:
                        self.idempotency.finish(
                            tx.idempotency_keys, scope, key, answer.status, text.decode("utf-8")
                        )
            if refusal is not None:
                raise refusal
            return Response(text, answer.status, media_type="application/json")

        return chained_attempts(attempt)  # again, heads locked, if one moved (decision 800)

    def read(self, effect: Effect) -> Response:
        """A read in one transaction (due holds are expired first, as the engine's reads do)."""
        with self.store.spend_transaction() as tx:
            answer = effect(tx, self.engine.within(tx))
        return json_response(answer.status, answer.body)

    # -- checks and views ---------------------------------------------------------------

    @staticmethod
    def usd_only(what: str, currency: str) -> None:
        if currency != CURRENCY:
            raise currency_not_supported(what, currency, fixable=False)

    @staticmethod
    def view(tx: WireTx, eng: SpendEngine, budget: Budget) -> BudgetView:
        now = eng.now()
        reserved, settled = tx.usage(budget.id, period_key(budget.period, now))
        remaining, _ = eng.remaining(budget.id)
        return budget_view(budget, reserved=reserved, settled=settled, remaining=remaining, now=now)

    @staticmethod
    def remaining(eng: SpendEngine, budget_id: str) -> Decimal:
        return eng.remaining(budget_id)[0]

    # -- effects --------------------------------------------------------------------------

    def quote_reads(self, tx: WireTx, body: QuoteRequest) -> None:
        """What a quote reads first, sent with its transaction's ``BEGIN`` (decision
        700): its budget's path as the last quote against it found it (else the budget
        alone) and its tree's spend chain head, without a lock (decision 800): a quote's
        hold first releases expired holds (``SpendEngine._expire``), whose usage rows
        every settlement and release locks before a chain head, so the head is locked
        when the quote appends."""
        path = self._paths.get(body.budgetId)
        heads = (spend_session_id(path[-1]),) if path else ()
        tx.prefetch(budgets=path or (body.budgetId,), heads=heads)

    def quote(self, tx: WireTx, eng: SpendEngine, body: QuoteRequest) -> Answer:
        amount = parse_amount(body.amount, allow_zero=False)
        who = caller()
        # Ownership first: nothing (policy, desk, audit) may see another's budget.
        path = spendable_path(eng, body.budgetId, who)
        not_managed_elsewhere("quote against", *(b.id for b in path))
        self._paths[body.budgetId] = tuple(b.id for b in path)
        self.usd_only(f"budget {body.budgetId}", path[0].currency)
        if body.currency != CURRENCY:
            raise currency_not_supported("the amount", body.currency, fixable=True)
        decision = decide_quote(
            self.pipeline,
            self.desk,
            tx,
            eng,
            who,
            body.model_dump(),
            body.budgetId,
            amount,
            body.currency,
            body.action,
            hold_seconds=body.holdSeconds or DEFAULT_HOLD_SECONDS,
        )
        if decision.refused is not None:
            exc = decision.refused
            tight = next(b for b in path if b.id == exc.budget_id)
            now = eng.now()
            reserved, _ = tx.usage(tight.id, period_key(tight.period, now))
            raise budget_exceeded(exc, tight, reserved, now) from exc
        res = decision.reservation
        if res is None:
            return self.not_held(decision, amount)
        left = self.remaining(eng, body.budgetId)
        release = f"POST /v1/reservations/{res.id}/release"
        data = QuoteData(
            quote=Quote(
                budgetId=body.budgetId,
                action=body.action,
                amount=to_wire(amount),
                currency=CURRENCY,
                verdict="ALLOW",
                reservation=ReservationRef(reservationId=res.id, expiresAt=rfc3339(res.expires_at)),
            ),
            receipt=receipt(
                "reserve",
                resources=[warden_resource("reservation", res.id)],
                reservationId=res.id,
            ),
            undo=undo_command(release),
            budgetRemainingUsd=usd(left),
            budgetRemaining=to_wire(left),
            currency=CURRENCY,
        )
        return Answer(
            200,
            success(
                data,
                [
                    f"Do the action, then POST /v1/reservations/{res.id}/commit with "
                    f'{{"actualAmount": "<at most {to_wire(amount)}>"}}',
                    f"If the action fails or is cancelled: {release}",
                    f"Unless committed or released, the hold expires at {rfc3339(res.expires_at)}",
                ],
            ),
        )

    def not_held(self, decision: QuoteDecision, amount: Decimal) -> Answer:
        """A quote the policy (or the desk) did not let hold, rendered: an answer with a
        task and ``approval:required`` while a human decides (it changed state, so it is
        cached); else raises ``policy:<rule>`` for deny and modify, ``approval:denied`` /
        ``approval:expired`` / ``approval:unavailable`` when the human said no, did not
        answer, or no desk is configured."""
        verdict = decision.verdict
        if verdict.decision in (VerdictEffect.ASK, VerdictEffect.DEFER):
            return self.human_answer(decision, amount)
        assert verdict.decision is not VerdictEffect.ALLOW  # an allow holds or is refused
        gate = winning_gate(self.guardian, verdict)
        if verdict.decision is VerdictEffect.MODIFY:
            raise Refusal(
                gate,
                403,
                verdict.reasoning or "the policy would change this spend",
                resolution=retry(
                    "resubmit with the policy's change: "
                    + json.dumps(verdict.modifications, sort_keys=True)
                ),
            )
        raise Refusal(gate, 403, verdict.reasoning or "denied by policy")

    def human_answer(self, decision: QuoteDecision, amount: Decimal) -> Answer:
        """The desk's answer for a quote the policy asks a human about and that holds
        nothing (a grant holds: see :meth:`quote`), rendered."""
        verdict, res = decision.verdict, decision.resolution
        if res is None:
            raise Refusal(
                "approval:unavailable",
                503,
                with_reasoning(
                    verdict.reasoning, "No approval desk is configured, so it is refused."
                ),
            )
        assert res.task is not None or res.outcome is Outcome.INVALID
        if res.outcome is Outcome.PENDING:
            assert res.task is not None
            return self.awaiting(
                res.task.id, with_reasoning(verdict.reasoning, res.text), requested=amount
            )
        raise Refusal(
            f"approval:{res.outcome.value}",
            403,
            with_reasoning(verdict.reasoning, res.text),
            resolution=retry("submit the quote again to ask a human again"),
        )

    def commit(self, tx: WireTx, eng: SpendEngine, rid: str, body: CommitRequest) -> Answer:
        actual = parse_amount(body.actualAmount, field="actualAmount")
        res = concludable_reservation(eng, rid, caller())
        self.usd_only(f"reservation {rid}", res.currency)
        rcpt = eng.settle(rid, actual, resources=tuple(r.model_dump() for r in body.resources))
        left = self.remaining(eng, res.budget_id)
        undo = f"POST /v1/receipts/{rcpt.id}/undo"
        data = CommitData(
            receipt=receipt(
                rcpt.action,
                one_time=rcpt.amount,
                resources=list(body.resources),
                receiptId=rcpt.id,
                reservationId=rid,
                amount=to_wire(rcpt.amount),
                currency=CURRENCY,
            ),
            undo=undo_command(undo),
            budgetRemainingUsd=usd(left),
            budgetRemaining=to_wire(left),
            currency=CURRENCY,
            reservation=reservation_view(eng.reservation(rid)),
        )
        return Answer(
            200,
            success(
                data,
                [
                    f"To reverse this spend: {undo}",
                    f"GET /v1/budgets/{res.budget_id} shows what is left",
                ],
            ),
        )

    def release(self, tx: WireTx, eng: SpendEngine, rid: str, body: ReasonRequest) -> Answer:
        res = concludable_reservation(eng, rid, caller())
        self.usd_only(f"reservation {rid}", res.currency)
        done = eng.release(rid, reason=body.reason or "released")
        left = self.remaining(eng, res.budget_id)
        data = ReleaseData(
            receipt=receipt(
                "release",
                resources=[warden_resource("reservation", rid)],
                reservationId=rid,
            ),
            undo=IRREVERSIBLE,
            budgetRemainingUsd=usd(left),
            budgetRemaining=to_wire(left),
            currency=CURRENCY,
            reservation=reservation_view(done),
        )
        return Answer(
            200,
            success(
                data,
                [
                    "A released hold cannot be taken back; POST /v1/quotes reserves again",
                    f"GET /v1/budgets/{res.budget_id} shows what is left",
                ],
            ),
        )

    def undo(self, tx: WireTx, eng: SpendEngine, rcp: str, body: ReasonRequest) -> Answer:
        original = undoable_receipt(eng, rcp, caller())
        self.usd_only(f"receipt {rcp}", original.currency)
        eng.undo(rcp, reason=body.reason or "undo")
        left = self.remaining(eng, original.budget_id)
        data = UndoData(
            receipt=receipt(
                "undo",
                resources=[warden_resource("receipt", rcp)],
                receiptId=rcp,
                reservationId=original.reservation_id,
                refundUsd=usd(original.amount),
                refund=to_wire(original.amount),
                currency=CURRENCY,
            ),
            undo=IRREVERSIBLE,
            budgetRemainingUsd=usd(left),
            budgetRemaining=to_wire(left),
            currency=CURRENCY,
        )
        return Answer(
            200,
            success(
                data,
                [
                    f"{to_wire(original.amount)} USD is back in budget {original.budget_id}; "
                    "an undo cannot itself be undone",
                    f"GET /v1/budgets/{original.budget_id} shows what is left",
                ],
            ),
        )

    def define(self, tx: WireTx, eng: SpendEngine, bid: str, body: BudgetDefinition) -> Answer:
        not_managed_elsewhere("define or change", bid, body.parent)
        old = tx.budget(bid)
        if old is not None:
            self.usd_only(f"budget {bid}", old.currency)
        if body.currency != CURRENCY:  # a stored budget is USD here: name what was sent
            what = f"budget {bid}" if old is None else f"this definition of USD budget {bid}"
            raise currency_not_supported(what, body.currency, fixable=True)
        budget = Budget(
            id=bid,
            kind=body.kind,
            currency=CURRENCY,
            cap=parse_amount(body.cap, field="cap"),
            period=body.period,
            parent_id=body.parent,
            name=body.name,
            # Omitted: the stored binding stays (none for a new budget); [] unbinds.
            principals=tuple(body.principals)
            if body.principals is not None
            else (old.principals if old is not None else ()),
        )
        eng.define_budget(budget)
        view = self.view(tx, eng, budget)
        remaining = Decimal(view.remaining)
        if old is None:
            undo = IRREVERSIBLE
        else:
            undo = undo_command(
                f"PUT /v1/budgets/{bid} "
                + json.dumps(
                    {
                        "kind": old.kind.value,
                        "parent": old.parent_id,
                        "currency": old.currency,
                        "cap": to_wire(old.cap),
                        "period": old.period.value,
                        "name": old.name,
                        "principals": list(old.principals),
                    },
                    separators=(",", ":"),
                )
            )
        data = BudgetDefineData(
            receipt=receipt(
                "budget.update" if old is not None else "budget.create",
                resources=[warden_resource("budget", bid)],
            ),
            undo=undo,
            budgetRemainingUsd=usd(remaining),
            budgetRemaining=to_wire(remaining),
            currency=CURRENCY,
            budget=view,
        )
        return Answer(
            200 if old is not None else 201,
            success(
                data,
                [
                    f"POST /v1/quotes with budgetId {bid} reserves against it",
                    f"GET /v1/budgets/{bid} shows its usage",
                ],
            ),
        )

    def request_increase(self, tx: WireTx, eng: SpendEngine, body: BudgetIncreaseRequest) -> Answer:
        path = readable_path(eng, body.budgetId, caller())
        budget = path[0]
        # The whole path, as a quote checks it: raising a budget under a plan's lets the
        # plan's money be spent around check_governance (decision 940).
        not_managed_elsewhere("raise", *(b.id for b in path))
        self.usd_only(f"budget {budget.id}", budget.currency)
        cap = parse_amount(body.cap, field="cap")
        if cap <= budget.cap:
            raise invalid(
                f"cap {to_wire(cap)} is not above the current cap {to_wire(budget.cap)} USD "
                f"of budget {budget.id}",
                gate="input:not_an_increase",
                hint=f"ask for more than {to_wire(budget.cap)} USD",
            )
        if self.desk is None:
            raise Refusal(
                "approval:unavailable", 503, "no approval desk is configured to decide this"
            )
        ask = budget_increase_ask(caller(), budget, cap, body.reason)
        task = file_budget_increase(self.desk, tx, ask)
        return self.awaiting(
            task.id,
            f"raising budget {budget.id} from {to_wire(budget.cap)} to {to_wire(cap)} USD "
            f"needs a human approval (group {BUDGET_APPROVERS}); task {task.id} is "
            "input_required. Once approved the cap is raised.",
            limit=budget.cap,
            requested=cap,
        )

    @staticmethod
    def awaiting(
        task_id: str,
        message: str,
        *,
        limit: Decimal | None = None,
        requested: Decimal | None = None,
    ) -> Answer:
        """``approval:required`` naming the task: an accepted submission that waits for a
        human, rendered as the approval gate and, having changed state, cached like a
        success (AdCP caches ``submitted``)."""
        waiting = Refusal(
            "approval:required",
            403,
            message,
            resolution=Resolution(type="human_approval", taskId=task_id),
            limit=limit,
            requested=requested,
        )
        return Answer(waiting.status, dump(waiting.envelope()))

    # -- reads ------------------------------------------------------------------------------

    def list_budgets(self, tx: WireTx, eng: SpendEngine, budgets: list[Budget]) -> Answer:
        eng.expire_due()
        who = caller()
        views = [
            self.view(tx, eng, b)
            for b in budgets
            if b.currency == CURRENCY and may_read_budget(b, who)
        ]
        return Answer(
            200,
            success(
                BudgetListData(budgets=views, currency=CURRENCY),
                [
                    "GET /v1/budgets/{budgetId} shows one budget and its path",
                    'POST /v1/quotes {budgetId, action, amount, "currency": "USD"} reserves',
                ],
            ),
        )

    def get_budget(self, tx: WireTx, eng: SpendEngine, bid: str) -> Answer:
        eng.expire_due()
        path = readable_path(eng, bid, caller())
        self.usd_only(f"budget {bid}", path[0].currency)
        view = self.view(tx, eng, path[0])
        remaining = Decimal(view.remaining)
        data = BudgetData(
            budget=view,
            path=[b.id for b in path],
            budgetRemainingUsd=usd(remaining),
            budgetRemaining=to_wire(remaining),
            currency=CURRENCY,
        )
        return Answer(
            200,
            success(
                data,
                [
                    f'POST /v1/quotes {{"budgetId": "{bid}", "action", "amount", '
                    '"currency": "USD"} reserves at most budgetRemaining',
                    'POST /v1/budget-requests {"budgetId", "cap", "reason"} asks a human '
                    "for a higher cap",
                ],
            ),
        )

    def get_reservation(self, tx: WireTx, eng: SpendEngine, rid: str) -> Answer:
        res = readable_reservation(eng, rid, caller())
        self.usd_only(f"reservation {rid}", res.currency)
        steps = (
            [
                f"POST /v1/reservations/{rid}/commit once the action succeeded",
                f"POST /v1/reservations/{rid}/release if it failed",
            ]
            if res.status.value == "held"
            else [f"GET /v1/budgets/{res.budget_id} shows what is left"]
        )
        return Answer(200, success(ReservationData(reservation=reservation_view(res)), steps))

    def get_receipt(self, tx: WireTx, eng: SpendEngine, rcp: str) -> Answer:
        got = readable_receipt(eng, rcp, caller())
        self.usd_only(f"receipt {rcp}", got.currency)
        data = ReceiptData(
            receipt=receipt(
                got.action,
                one_time=got.amount,
                resources=[Resource(**r) for r in got.resources],
                receiptId=rcp,
                reservationId=got.reservation_id,
                amount=to_wire(got.amount),
                currency=CURRENCY,
            ),
            budgetId=got.budget_id,
            createdAt=rfc3339(got.created_at),
            **({"undoneAt": rfc3339(got.undone_at)} if got.undone_at is not None else {}),
        )
        step = f"POST /v1/receipts/{rcp}/undo reverses it" if got.undone_at is None else None
        return Answer(200, success(data, [step or f"GET /v1/budgets/{got.budget_id}"]))

    def get_task(self, tx: WireTx, eng: SpendEngine, tid: str) -> Answer:
        task = tx.tasks.get(tid)
        who = caller()
        if task is not None and who.principal not in task.requester.names():
            # Another agent's task reads as absent (no existence leak); approvers see all.
            task = task if who.may(Role.APPROVER) else None
        if task is None:
            raise Refusal(
                "input:unknown_task",
                404,
                f"no task {tid!r}",
                resolution=Resolution(
                    type="retry", hint="use the taskId that POST /v1/budget-requests returned"
                ),
            )
        steps = (
            [f"Poll GET /v1/tasks/{tid}: a human decides it on the approval desk"]
            if not task.status.terminal
            else ["The task is finished"]
        )
        return Answer(200, success(TaskData(task=task_view(task)), steps))
