"""A resubmitted ask whose task still waits is answered from a read (issue 16).

The approval gate used to open a write transaction of its own for every ask; now a
pending, unexpired task is found with a plain read, and only the step's entry commit
writes. The statements are counted on the store's own SQLite connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from conftest import asset, service_client

from warden.approvals.tasks import ApprovalState
from warden.runtime import Runtime

DESK = asset("approvals/desk.yaml")


@contextmanager
def statements(rt: Runtime) -> Iterator[list[str]]:
    """Every SQL statement the runtime's store connection runs inside the block."""
    seen: list[str] = []
    conn = rt.store._raw.dbapi_connection  # noqa: SLF001 - instrumentation only
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def _ask(client: Any) -> dict[str, Any]:
    out: dict[str, Any] = client.tool_call("delete_file", {"path": "/srv/a"})["result"]
    return out


def test_pending_ask_takes_one_write_transaction(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(DESK)
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    first = _ask(agent)
    assert first["decision"] == "ask"
    with statements(rt) as seen:
        again = _ask(agent)
    assert again["decision"] == "ask"
    assert again["ask_details"]["task_id"] == first["ask_details"]["task_id"]
    begins = [s for s in seen if s.upper().startswith("BEGIN")]
    assert len(begins) == 1, seen  # the entry's commit only
    writes = ("INSERT INTO TASKS", "UPDATE TASKS", "INSERT INTO APPROVAL")
    assert not [s for s in seen if s.upper().startswith(writes)], seen
    assert len(rt.desk.list()) == 1


def test_an_expired_task_still_goes_through_the_desk(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(DESK)
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = _ask(agent)["ask_details"]["task_id"]
    later = rt.desk.now() + timedelta(hours=2)
    rt.desk.clock = lambda: later
    with statements(rt) as seen:
        answer = _ask(agent)
    # The lapsed task is expired in a write transaction and reported as a deny.
    assert answer["decision"] == "deny", answer
    assert len([s for s in seen if s.upper().startswith("BEGIN")]) == 2, seen
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.EXPIRED
