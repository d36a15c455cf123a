"""On PostgreSQL an ACS ask that files a desk task files it in the step's own append
transaction (decision 640): the task, its desk-chain entry and the step's entry commit
together or not at all, and a task the desk did not know of is never filed twice."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_IKM, asset, postgres_schema, service_client, write_key
from test_desk_acs import DESK, approver, ask

from warden.approvals.desk import desk_session_id
from warden.approvals.tasks import ApprovalState
from warden.errors import KeyRevoked
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.settings import Settings
from warden.spend import Budget, BudgetKind, Period
from warden.wire.acs.client import AcsClient


@pytest.fixture
def pg_runtime(tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    """Runtimes (replicas) sharing one fresh PostgreSQL schema."""
    made: list[Runtime] = []
    with postgres_schema() as url:

        def make(policy: Path = DESK) -> Runtime:
            data = tmp_path / f"data{len(made)}"
            settings = Settings(
                data_dir=data,
                policy=policy,
                key_file=write_key(data / "ikm.key"),
                database_url=url,
            )
            rt = Runtime.start(settings)
            made.append(rt)
            return rt

        yield make
        for rt in made:
            rt.close()


def _tasks(rt: Runtime) -> list[Any]:
    with rt.store.engine.connect() as conn:
        from sqlalchemy import text

        return list(conn.execute(text("SELECT task_id, state FROM tasks")).fetchall())


def _desk_entries(rt: Runtime) -> int:
    return sum(1 for r in rt.store.iter_records(desk_session_id()) if r.get("kind") == "entry")


def test_the_task_commits_with_the_step_entry(pg_runtime: Callable[..., Runtime]) -> None:
    rt = pg_runtime()
    assert rt.desk.fold_filing
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    answer = ask(agent, "delete_file", {"path": "/srv/a"})
    assert answer["decision"] == "ask"
    tid = answer["ask_details"]["task_id"]
    assert [(t[0], t[1]) for t in _tasks(rt)] == [(tid, "pending")]
    task = rt.desk.get(tid)
    assert task is not None and len(task.history) == 1
    # The task's history names the desk-chain entry written in the same transaction.
    hashes = [
        r["entry"]["entry_hash"]
        for r in rt.store.iter_records(desk_session_id())
        if r.get("kind") == "entry"
    ]
    assert hashes == [task.history[0]["entry_hash"]]
    # The resubmission is answered from memory, with the same task.
    assert ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"] == tid
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_a_step_that_is_not_recorded_files_no_task(pg_runtime: Callable[..., Runtime]) -> None:
    """The agent is revoked on another replica between its authentication (cached here)
    and the append: the append refuses, and the task it carried is not filed."""
    rt = pg_runtime()
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    before = _desk_entries(rt)
    other = pg_runtime()
    other.agents.revoke("agent-7")
    response = agent.tool_call("delete_file", {"path": "/srv/b"})
    assert "error" in response, response
    assert response["error"]["data"]["reason"] == KeyRevoked.reason
    assert _tasks(rt) == []
    assert _desk_entries(rt) == before
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_a_task_the_desk_did_not_know_of_is_not_filed_twice(
    pg_runtime: Callable[..., Runtime],
) -> None:
    """A replica (or a restart) that never saw the task files optimistically; the append
    finds the pending task, refuses, and the step is decided again from the database."""
    rt = pg_runtime()
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    rt.desk._pending_by_action.clear()  # noqa: SLF001 - as a cold replica's desk
    again = ask(agent, "delete_file", {"path": "/srv/a"})
    assert again["decision"] == "ask"
    assert again["ask_details"]["task_id"] == tid
    assert [t[0] for t in _tasks(rt)] == [tid]
    assert _desk_entries(rt) == 1
    # A different action files its own task.
    other = ask(agent, "delete_file", {"path": "/srv/c"})["ask_details"]["task_id"]
    assert other != tid and len(_tasks(rt)) == 2
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_sqlite_never_folds_but_a_folded_write_still_commits_with_its_entry(
    make_runtime: Callable[..., Runtime],
) -> None:
    """SQLite's desk keeps its own transaction (unchanged); a store given a folded write
    anyway runs it on the append's transaction, statement by statement."""
    rt = make_runtime(DESK)
    assert not rt.desk.fold_filing
    rt.desk.fold_filing = True
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    assert [t[0] for t in _tasks(rt)] == [tid]
    assert _desk_entries(rt) == 1
    rt.desk._pending_by_action.clear()  # noqa: SLF001
    assert ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"] == tid
    assert [t[0] for t in _tasks(rt)] == [tid]
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def _history(rt: Runtime, tid: str) -> list[str]:
    task = rt.desk.get(tid)
    assert task is not None
    return [str(h["event"]) for h in task.history]


def test_a_grant_is_consumed_with_the_step_entry(pg_runtime: Callable[..., Runtime]) -> None:
    """Approved on this replica, the resubmission consumes the grant in its own append's
    transaction (decision 645): the consumed task's history names a desk-chain entry
    committed with the step's entry, and the grant is single use."""
    rt = pg_runtime()
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "operators"), "ok")
    allowed = ask(agent, "delete_file", {"path": "/srv/a"})
    assert allowed["decision"] == "allow"
    assert allowed["policy_data"]["approval"]["task_id"] == tid
    assert allowed["policy_data"]["approval"]["state"] == "consumed"
    task = rt.desk.get(tid)
    assert task is not None and task.state is ApprovalState.CONSUMED
    assert task.consumed_by is not None and task.consumed_by["session_id"] == agent.session_id
    assert _history(rt, tid) == ["requested", "approved", "consumed"]
    hashes = [
        r["entry"]["entry_hash"]
        for r in rt.store.iter_records(desk_session_id())
        if r.get("kind") == "entry"
    ]
    assert hashes == [h["entry_hash"] for h in task.history]
    again = ask(agent, "delete_file", {"path": "/srv/a"})
    assert again["decision"] == "ask" and again["ask_details"]["task_id"] != tid
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_a_step_that_is_not_recorded_leaves_the_grant_unconsumed(
    pg_runtime: Callable[..., Runtime],
) -> None:
    """The resubmission's append is refused (the agent revoked on another replica): the
    grant was never consumed, so there is nothing to give back — no consumed and
    restored transitions in the desk chain, the task simply stays approved."""
    rt = pg_runtime()
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "operators"), "ok")
    before = _desk_entries(rt)
    pg_runtime().agents.revoke("agent-7")
    response = agent.tool_call("delete_file", {"path": "/srv/a"})
    assert "error" in response, response
    assert response["error"]["data"]["reason"] == KeyRevoked.reason
    assert _history(rt, tid) == ["requested", "approved"]
    assert _desk_entries(rt) == before
    assert [(t[0], t[1]) for t in _tasks(rt)] == [(tid, "approved")]
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_a_grant_approved_on_another_replica_is_consumed_once(
    pg_runtime: Callable[..., Runtime],
) -> None:
    """Approved elsewhere, this replica's memory says pending: the guard sends the step
    back to the database, which finds the grant and consumes it with the entry. A
    replica that remembers a grant consumed elsewhere since is refused by the guard and
    files a new task instead of consuming it twice."""
    rt, other = pg_runtime(), pg_runtime()
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = ask(agent, "delete_file", {"path": "/srv/a"})["ask_details"]["task_id"]
    other.desk.approve(tid, approver(other, "alice", "operators"), "ok")
    assert ask(agent, "delete_file", {"path": "/srv/a"})["decision"] == "allow"
    assert _history(rt, tid) == ["requested", "approved", "consumed"]

    tid2 = ask(agent, "delete_file", {"path": "/srv/b"})["ask_details"]["task_id"]
    rt.desk.approve(tid2, approver(rt, "bob", "operators"), "ok")  # rt remembers it
    there = copy.copy(agent)
    there.transport = other.acs.handle
    assert ask(there, "delete_file", {"path": "/srv/b"})["decision"] == "allow"
    agent.chain_hash = there.chain_hash
    refiled = ask(agent, "delete_file", {"path": "/srv/b"})
    assert refiled["decision"] == "ask" and refiled["ask_details"]["task_id"] != tid2
    assert _history(rt, tid2) == ["requested", "approved", "consumed"]
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


#: The refund both spend-gate tests ask for: over the shopper's agent budget (100 USD).
REFUND = {"amount": 500, "currency": "USD", "refund": True}


def _a_refund_granted_over_budget(rt: Runtime, team_cap: int) -> tuple[AcsClient, str, Budget]:
    """A shop (org 1000 USD, team ``team_cap``, agent ``shopper`` 100) whose agent asked
    for :data:`REFUND` and had it approved: the agent, the task id and the agent budget."""
    rt.spend.define_budget(Budget("shop", BudgetKind.ORG, "USD", Decimal(1000), Period.NONE))
    rt.spend.define_budget(
        Budget("shop.ops", BudgetKind.TEAM, "USD", Decimal(team_cap), Period.NONE, "shop")
    )
    shopper = Budget(
        "shop.ops.shopper", BudgetKind.AGENT, "USD", Decimal(100), Period.NONE, "shop.ops"
    )
    rt.spend.define_budget(shopper)
    agent = service_client(rt, agent_id="shopper")
    agent.hello()
    tid = ask(agent, "pay", REFUND)["ask_details"]["task_id"]
    rt.desk.approve(tid, approver(rt, "alice", "desk"), "ok")
    return agent, tid, shopper


def test_a_granted_step_the_spend_gate_denies_leaves_the_grant_approved(
    pg_runtime: Callable[..., Runtime],
) -> None:
    """A refund over the agent's budget is asked, approved, resubmitted: the spend gate
    denies it (``budget_exceeded``). The grant, consumed with the entry only if that
    entry allowed the step, was never consumed: no consumed/restored pair is chained
    (decision 647) and the grant is still there."""
    rt = pg_runtime(asset("policy/spend_policy.yaml"))
    agent, tid, _ = _a_refund_granted_over_budget(rt, team_cap=150)
    before = _desk_entries(rt)
    denied = ask(agent, "pay", REFUND)
    assert denied["decision"] == "deny" and "budget_exceeded" in denied["reason_codes"]
    assert _history(rt, tid) == ["requested", "approved"]
    assert _desk_entries(rt) == before
    assert [(t[0], t[1]) for t in _tasks(rt)] == [(tid, "approved")]
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_a_grant_the_spend_gate_refuses_is_never_consumed(
    make_backend_runtime: Callable[..., Runtime],
) -> None:
    """Decision 975, on both backends: the grant is read, the spend gate refuses the
    step, and the grant was never consumed: no consumed/restored pair on the desk chain
    (SQLite consumed it in the desk's transaction before the spend gate ran, then gave
    it back). Once the budget has room, the same step consumes it, once."""
    rt = make_backend_runtime(asset("policy/spend_policy.yaml"))
    agent, tid, shopper = _a_refund_granted_over_budget(rt, team_cap=1000)
    before = _desk_entries(rt)
    for _ in range(2):
        denied = ask(agent, "pay", REFUND)
        assert denied["decision"] == "deny" and "budget_exceeded" in denied["reason_codes"]
        assert _history(rt, tid) == ["requested", "approved"]
        assert _desk_entries(rt) == before
    rt.spend.define_budget(dataclasses.replace(shopper, cap=Decimal(1000)))
    allowed = ask(agent, "pay", REFUND)
    assert allowed["decision"] == "allow", allowed
    assert _history(rt, tid) == ["requested", "approved", "consumed"]
    assert [(t[0], t[1]) for t in _tasks(rt)] == [(tid, "consumed")]
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)
