"""``ApprovalDesk.listeners``: a hook per task kind, called inside the desk's transaction
after every transition is written; raising rolls the transition back."""

from __future__ import annotations

from typing import Any

import pytest

from warden.approvals.desk import AskRequest
from warden.approvals.tasks import ApprovalState, Event, Requester, Task, TaskKind
from warden.identity.api_keys import Role
from warden.runtime import Runtime


def file(rt: Runtime, kind: TaskKind = TaskKind.ACTION) -> Task:
    ask = AskRequest(
        kind=kind,
        wire="test",
        scope="s1",
        action={"method": "m", "name": "n", "arguments": {"kind": kind.value}},
        requester=Requester("agent-1", "bob"),
        approver_group="finance",
        question="ok?",
        timeout_s=600,
    )
    with rt.store.transaction() as tx:
        return rt.desk.file(tx, ask)


def test_listeners_see_each_transition_of_their_kind(runtime: Runtime) -> None:
    seen: list[tuple[str, str, str | None, str]] = []

    def listen(tx: Any, task: Task, event: Event, by: Any, reason: str) -> None:
        assert tx.tasks.get(task.id).state is task.state  # written before the call
        seen.append((task.id, event.value, by.principal if by else None, reason))

    runtime.desk.listeners[TaskKind.ACTION] = listen
    fay, _ = runtime.api_keys.create("fay", Role.APPROVER, ["finance", "risk"])
    task = file(runtime)
    other = file(runtime, TaskKind.SPEND_APPROVAL)
    assert seen == []  # filing is not a transition
    runtime.desk.reroute(task.id, fay, "risk", "risk first")
    runtime.desk.approve(task.id, fay, "fine")
    runtime.desk.deny(other.id, fay, "no")  # another kind: not seen
    assert seen == [
        (task.id, "rerouted", "fay", "risk first"),
        (task.id, "approved", "fay", "fine"),
    ]


def test_a_raising_listener_rolls_the_transition_back(runtime: Runtime) -> None:
    def refuse(tx: Any, task: Task, event: Event, by: Any, reason: str) -> None:
        raise RuntimeError("listener failed")

    runtime.desk.listeners[TaskKind.ACTION] = refuse
    fay, _ = runtime.api_keys.create("fay", Role.APPROVER, ["finance"])
    task = file(runtime)
    with pytest.raises(Exception, match="listener failed"):
        runtime.desk.approve(task.id, fay, "fine")
    again = runtime.desk.get(task.id)
    assert again is not None and again.state is ApprovalState.PENDING and again.votes == ()
