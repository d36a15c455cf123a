"""A task decided on another replica, met by a replica that remembers it pending
(PostgreSQL, decisions 820–821): the step's append finds its read guard changed and, in
the same round trip, reads the action's newest task for the desk; the transaction it
began locked nothing and is ended with the next ``BEGIN`` on the connection. The grant
is consumed once, in the resubmitted step's own transaction; a denial is answered."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_IKM, postgres_schema, service_client, write_key
from sqlalchemy import create_engine, text
from test_desk_acs import DESK, approver, ask

from warden.approvals.tasks import ApprovalState
from warden.errors import StaleRead
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.settings import Settings
from warden.store.base import TaskUnchanged
from warden.store.sql import SqlStore


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Callable[[], Runtime]]:
    """Runtimes (replicas) sharing one fresh PostgreSQL schema."""
    made: list[Runtime] = []
    with postgres_schema() as url:

        def make() -> Runtime:
            data = tmp_path / f"data{len(made)}"
            rt = Runtime.start(
                Settings(
                    data_dir=data,
                    policy=DESK,
                    key_file=write_key(data / "ikm.key"),
                    database_url=url,
                )
            )
            made.append(rt)
            return rt

        yield make
        for rt in made:
            rt.close()


class _Begins:
    """Counts the transactions that began with the end of a left-open one."""

    def __init__(self, store: SqlStore) -> None:
        self.absorbed = 0
        self._store = store
        self._begin = store._begin  # noqa: SLF001

    def __call__(self) -> tuple[str, int]:
        sql, skip = self._begin()
        self.absorbed += skip
        return sql, skip


def _on(agent: Any, rt: Runtime) -> Any:
    """The same ACS client, its requests sent to replica ``rt``."""
    there = copy.copy(agent)
    there.transport = rt.acs.handle
    return there


def _history(rt: Runtime, tid: str) -> list[str]:
    task = rt.desk.get(tid)
    assert task is not None
    return [str(h["event"]) for h in task.history]


def test_a_grant_approved_on_b_is_allowed_once_on_a_and_never_again(
    replicas: Callable[[], Runtime],
) -> None:
    """Replicas A and B both remember the task pending; C approves it. A's resubmission
    is allowed and consumes the grant in its own transaction, through the failed guard's
    read (the transaction it left open ends with the consumption's ``BEGIN``). The same
    step again on A, or on B (whose memory still says pending), is not granted again:
    a new task is filed."""
    a, b, c = replicas(), replicas(), replicas()
    agent = service_client(a, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    on_b = _on(agent, b)
    assert ask(on_b, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"] == tid
    agent.chain_hash = on_b.chain_hash
    c.desk.approve(tid, approver(c, "alice", "operators"), "ok")

    begins = _Begins(a.store)
    a.store._begin = begins  # type: ignore[method-assign]  # noqa: SLF001
    allowed = ask(agent, "delete_file", {"path": "/srv/a"})
    assert allowed["decision"] == "allow", allowed
    assert allowed["policy_data"]["approval"] == {
        **allowed["policy_data"]["approval"],
        "task_id": tid,
        "state": "consumed",
        "outcome": "granted",
    }
    assert begins.absorbed == 1  # the failed guard's transaction, ended with that BEGIN
    assert not a.store._dangling  # noqa: SLF001
    task = a.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CONSUMED
    assert task.consumed_by is not None and task.consumed_by["session_id"] == agent.session_id
    assert _history(a, tid) == ["requested", "approved", "consumed"]

    again_a = ask(agent, "delete_file", {"path": "/srv/a"})
    assert again_a["decision"] == "ask" and again_a["ask_details"]["task_id"] != tid
    on_b.chain_hash = agent.chain_hash
    again_b = ask(on_b, "delete_file", {"path": "/srv/a"})
    assert again_b["decision"] == "ask", again_b
    assert again_b["ask_details"]["task_id"] == again_a["ask_details"]["task_id"]
    assert _history(b, tid) == ["requested", "approved", "consumed"]
    assert not b.store._dangling  # noqa: SLF001
    verify_records(a.store.iter_records(), ikm=TEST_IKM)


def test_a_task_denied_on_b_answers_deny_on_a(replicas: Callable[[], Runtime]) -> None:
    """Denied on B while A remembers the task pending: A's append finds the guard
    changed and reads the denial in the same round trip; the desk's own transaction
    reports it (on a connection whose left-open transaction is ended first): deny, once,
    then the same step asks again."""
    a, b = replicas(), replicas()
    agent = service_client(a, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    b.desk.deny(tid, approver(b, "alice", "operators"), "no")
    denied = ask(agent, "delete_file", {"path": "/srv/a"})
    assert denied["decision"] == "deny", denied
    assert "approval_denied" in denied["reason_codes"]
    assert denied["policy_data"]["approval"]["task_id"] == tid
    assert not a.store._dangling  # noqa: SLF001
    again = ask(agent, "delete_file", {"path": "/srv/a"})
    assert again["decision"] == "ask" and again["ask_details"]["task_id"] != tid
    verify_records(a.store.iter_records(), ikm=TEST_IKM)


def test_a_failed_guard_reads_the_newest_task_and_holds_no_lock(
    replicas: Callable[[], Runtime],
) -> None:
    """The append's first round trip, its guard failed: ``StaleRead.found`` is what the
    desk would read (the approved task with its record), the log counter is not locked
    (another connection takes it without waiting), and the next use of the connection
    ends the transaction before anything else."""
    a, b = replicas(), replicas()
    agent = service_client(a, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    pending = a.desk.get(tid)
    assert pending is not None
    b.desk.approve(tid, approver(b, "alice", "operators"), "ok")
    store = a.store
    assert isinstance(store, SqlStore)
    stale = TaskUnchanged(tid, pending.updated_at.isoformat(), pending.scope, pending.action_hash)
    session = store.load_session(agent.session_id, fresh=True)
    assert session is not None
    item = a.acs.ledger.stage(
        session,
        {"step_id": "probe", "verdict": {"decision": "ask"}},
        lambda entry: {"result": {}},
        replay=None,
        indexed=lambda index: {"result": {"index": index}},
        guards=(stale,),
    )
    (outcome,) = store.append_many([item])
    assert isinstance(outcome, StaleRead), outcome
    assert outcome.found is not None and outcome.found is not StaleRead.MISSING
    head, task = outcome.found
    assert head[0] == tid and head[1] == "approved"
    assert task is not None and task.id == tid and task.state is ApprovalState.APPROVED
    assert store._dangling  # noqa: SLF001
    other = create_engine(store.engine.url)
    try:
        with other.connect() as conn:
            conn.execute(text("SET lock_timeout = '2s'"))
            conn.execute(text("SELECT next_index FROM log_state WHERE id = 1 FOR UPDATE NOWAIT"))
            conn.rollback()
        # The next use ends it; the step then goes on as usual.
        assert store.load_session(agent.session_id, fresh=True) is not None
        assert not store._dangling  # noqa: SLF001
        with other.connect() as conn:
            states = conn.execute(
                text(
                    "SELECT state FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'idle in transaction' AND pid <> pg_backend_pid() "
                    "AND query LIKE '%FROM log_state WHERE id = 1 AND EXISTS%'"
                )
            ).fetchall()
        assert states == []
    finally:
        other.dispose()
    assert ask(agent, "delete_file", {"path": "/srv/a"})["decision"] == "allow"
    assert _history(a, tid) == ["requested", "approved", "consumed"]


def test_a_guard_that_holds_changes_nothing(replicas: Callable[[], Runtime]) -> None:
    """The steady ask (the task still pending as remembered): no newest-task row, the
    counter locked as before, nothing left open, the answer still pending."""
    a = replicas()
    agent = service_client(a, agent_id="agent-7")
    agent.hello()
    first = ask(agent, "delete_file", {"path": "/srv/a"})
    again = ask(agent, "delete_file", {"path": "/srv/a"})
    assert again["decision"] == "ask"
    assert again["ask_details"]["task_id"] == first["ask_details"]["task_id"]
    assert not a.store._dangling  # noqa: SLF001


def test_a_folded_append_that_fails_in_its_first_round_trip_rolls_back(
    replicas: Callable[[], Runtime],
) -> None:
    """The folded append's first string fails after its ``BEGIN`` (here a division by
    zero stands for a lock timeout or a detected deadlock): the step is refused, and the
    connection is not left in an aborted transaction — the next step is answered
    (decision 823)."""
    a = replicas()
    agent = service_client(a, agent_id="agent-7")
    agent.hello()
    store = a.store
    assert isinstance(store, SqlStore)
    store._begin = lambda: ("BEGIN; SELECT 1/0", 0)  # type: ignore[method-assign]  # noqa: SLF001
    refused = agent.tool_call("delete_file", {"path": "/srv/a"})
    # Fail closed: an error, or a deny recorded without the task.
    assert "error" in refused or refused["result"]["decision"] == "deny", refused
    del store._begin  # noqa: SLF001 - the class's own again
    answered = ask(agent, "delete_file", {"path": "/srv/a"})
    assert answered["decision"] == "ask", answered


def test_two_replicas_resubmitting_at_once_consume_the_grant_once(
    replicas: Callable[[], Runtime],
) -> None:
    """A and B both remember the task pending, C approves it, and the step is resubmitted
    on A and on B at the same moment: exactly one is allowed, the grant is consumed once
    (one ``consumed`` in its history), whatever the interleaving."""
    a, b, c = replicas(), replicas(), replicas()
    agent = service_client(a, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    on_b = _on(agent, b)
    assert ask(on_b, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"] == tid
    agent.chain_hash = on_b.chain_hash
    c.desk.approve(tid, approver(c, "alice", "operators"), "ok")
    start = threading.Barrier(2)
    answers: list[dict[str, Any]] = []

    def resubmit(client: Any) -> None:
        start.wait()
        answers.append(client.tool_call("delete_file", {"path": "/srv/a"}))

    threads = [threading.Thread(target=resubmit, args=(cl,)) for cl in (agent, on_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decisions = [r.get("result", {}).get("decision") for r in answers]
    assert decisions.count("allow") == 1, answers
    assert _history(c, tid) == ["requested", "approved", "consumed"]
    assert not a.store._dangling and not b.store._dangling  # noqa: SLF001
    verify_records(c.store.iter_records(), ikm=TEST_IKM)
