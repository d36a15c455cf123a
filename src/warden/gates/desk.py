"""The desk ask of the REST wires: an ``ask`` or ``defer`` files (or matches) its approval
task inside the step's own transaction (issue 16).

The spend wire's quotes and KLA's action requests decide, ask the desk and write their
audit entries in one store transaction (:class:`~warden.core.pipeline.Recording`).
:class:`DeskAsk` is their approval gate: the pipeline runs it on that transaction, so
the task, its desk chain entry and its webhook outbox rows commit with the step's
entry or not at all. (ACS's :class:`~warden.gates.approval.ApprovalStep` differs
because an ACS entry commits through group commit, outside any transaction a gate could
join.)

Unlike the ACS gate, this one does not rewrite the verdict: it records the desk's
answer (:attr:`DeskAsk.resolution`) and notes it in ``policy_data.approval``; the
policy's ``ask`` stands, because these wires answer a human's decision in their own
vocabulary (spend ``approval:denied``, KLA ``require_approval`` with a task) and their
records keep the policy's decision, as before (docs/decisions.md 440).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from warden.approvals.desk import ApprovalDesk, AskRequest, DeskTx, Resolution
from warden.core.types import ActionRequest, Effect, Verdict

#: What a wire's desk ask is built from: the request and the policy's verdict.
AskBuilder = Callable[[ActionRequest, Verdict], AskRequest]


def asks_desk(verdict: Verdict) -> bool:
    """Whether a REST wire sends this verdict to the desk: any ``ask`` or ``defer``."""
    return verdict.decision in (Effect.ASK, Effect.DEFER)


class DeskAsk:
    """One step's desk ask, in the caller's transaction ``tx``.

    ``build`` makes the :class:`AskRequest` from the request and the verdict (the wire's
    domain module owns its shape: :func:`warden.spend.asks.quote_ask`,
    :func:`warden.kla.asks.desk_ask`); ``consumer`` is recorded on a grant this step
    consumes. After the pipeline ran, :attr:`resolution` is the desk's answer (None when
    the verdict needed no human) and :attr:`task` the task it names.
    """

    def __init__(
        self, desk: ApprovalDesk, tx: DeskTx, build: AskBuilder, consumer: dict[str, Any]
    ) -> None:
        self.desk = desk
        self.tx = tx
        self.build = build
        self.consumer = consumer
        self.resolution: Resolution | None = None

    @property
    def task(self) -> Any:
        """The task the desk's answer names (filed, matched or consumed), or None."""
        return self.resolution.task if self.resolution is not None else None

    # -- the pipeline's Gate protocol (warden.core.pipeline.Gate) ------------------

    def wants(self, request: ActionRequest, verdict: Verdict) -> bool:
        return self.resolution is not None or asks_desk(verdict)

    def blocking(self, request: ActionRequest, verdict: Verdict) -> bool:
        return self.resolution is None

    def apply(self, request: ActionRequest, verdict: Verdict) -> Verdict:
        """Resolve the ask in ``tx`` (once; a retry reuses the answer) and note it in
        ``policy_data.approval``. Store failures propagate: the caller's transaction
        rolls back with everything the step wrote."""
        if self.resolution is None:
            self.resolution = self.desk.resolve(
                self.tx, self.build(request, verdict), self.consumer
            )
        res = self.resolution
        info: dict[str, Any] = {"outcome": res.outcome.value}
        if res.task is not None:
            info.update(task_id=res.task.id, state=res.task.state.value)
        return replace(verdict, policy_data={**verdict.policy_data, "approval": info})

    def holding(self) -> bool:
        """Nothing to give back outside ``tx``: a grant this step consumed is part of the
        step's transaction, and rolls back with it."""
        return False

    def abandon(self, why: str) -> None:
        """Nothing to do (see :meth:`holding`)."""
