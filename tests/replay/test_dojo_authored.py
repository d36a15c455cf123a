"""The authored calls of AgentDojo v1.2 workspace injection_task_6-13 achieve their goals,
by each task's own security() on a clean environment (run as AgentDojo runs an injection
task's ground truth: default environment, no user task, every call executed)."""

from __future__ import annotations

import pytest

from warden.replay.dojo_authored import AUTHORED, authored_calls
from warden.replay.dojo_suite import DojoSuite


@pytest.fixture(scope="module")
def workspace() -> DojoSuite:
    return DojoSuite("workspace")


def _run(dojo: DojoSuite, task_id: str, drop_last: bool = False) -> bool:
    env = dojo.clean_environment()
    pre = env.model_copy(deep=True)
    calls = authored_calls("workspace", task_id, env)
    assert calls, task_id
    for call in calls[:-1] if drop_last else calls:
        assert dojo.run(env, call).error is None, (task_id, call)
    return dojo.check(dojo.injection_task(task_id), "", pre, env)


@pytest.mark.parametrize("task_id", sorted(AUTHORED))
def test_authored_calls_achieve_the_goal(workspace: DojoSuite, task_id: str) -> None:
    # AgentDojo's own ground truth is still empty (else the authored set is not needed).
    assert workspace.injection_task(task_id).ground_truth(workspace.clean_environment()) == []
    assert _run(workspace, task_id)
    # Without the last call the goal is not reached: security() does look at it.
    assert not _run(workspace, task_id, drop_last=True)


def test_only_workspace_6_to_13_are_authored(workspace: DojoSuite) -> None:
    assert sorted(AUTHORED) == sorted(f"injection_task_{n}" for n in range(6, 14))
    env = workspace.clean_environment()
    assert authored_calls("workspace", "injection_task_0", env) is None
    assert authored_calls("slack", "injection_task_6", env) is None
    # The calls are computed without touching the environment (get_unread would mark mail read).
    before = env.model_dump_json()
    for task_id in AUTHORED:
        authored_calls("workspace", task_id, env)
    assert env.model_dump_json() == before
