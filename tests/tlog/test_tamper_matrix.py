"""The tamper matrix of issue 17 on both backends: each tampering with a stopped
Warden's database (no key needed) is caught by ``warden verify``'s check
(:func:`warden.cli_ledger.verify_chains`), at the right place.

The history: sessions A, B and C of real ACS decisions and an approver key. A client
kept the checkpoint signed at shutdown (``kept``); C's leaves are the newest."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import fixed_key_id, service_client
from sqlalchemy import text

from warden.approvals.desk import AskRequest
from warden.approvals.tasks import Requester, TaskKind
from warden.cli_ledger import verify_chains
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.spend.budgets import Budget, BudgetKind, Period
from warden.spend.errors import BudgetExceeded
from warden.store import tlog_sql


def _state_history(rt: Runtime) -> dict[str, Any]:
    """The state tables' part of the history, through the runtime's own services (each
    change chained as in production): agents (one revoked, one rotated), approvers, a
    budget tree with holds held, settled, released and undone, and approval tasks
    pending, half-voted, approved, denied and rerouted."""
    assert rt.agents is not None
    for agent in ("agent-a", "agent-b", "agent-c"):  # audited, unlike the test helper's
        rt.agents.add(agent, f"{agent}.owner", ["ops"], key_id=fixed_key_id(agent))
    rt.agents.add("agent-x", "olive", ["ops"], ["team-1"])
    rt.agents.add("agent-gone", "olive")
    rt.api_keys.create("agent-gone", Role.AGENT)
    rt.agents.revoke("agent-gone")
    rt.agents.rotate("agent-x")
    alice, _ = rt.api_keys.create("alice", Role.APPROVER, ["ops"])
    bob, _ = rt.api_keys.create("bob", Role.APPROVER, ["ops", "risk"])
    spend = rt.spend
    spend.define_budget(Budget("org-1", BudgetKind.ORG, "USD", Decimal(1000), Period.MONTH))
    spend.define_budget(
        Budget("team-1", BudgetKind.TEAM, "USD", Decimal(500), Period.DAY, "org-1", "Team")
    )
    spend.define_budget(  # a cap raised later: the newest event is what the row must say
        Budget("team-1", BudgetKind.TEAM, "USD", Decimal(600), Period.DAY, "org-1", "Team")
    )
    held = spend.reserve("team-1", "10.00", "USD", action="held", principal="alice")
    settled = spend.reserve("team-1", "20", "USD", action="settled")
    receipt = spend.settle(settled.id, "15.5")
    undone = spend.settle(spend.reserve("team-1", "7", "USD", action="undone").id, "7")
    spend.undo(undone.id)
    released = spend.reserve("team-1", "3", "USD", action="released")
    spend.release(released.id)
    with pytest.raises(BudgetExceeded):
        spend.reserve("team-1", "10000", "USD", action="refused")
    tasks = {}
    for name, required in (
        ("pending", 1),
        ("half", 2),
        ("approved", 1),
        ("denied", 1),
        ("rerouted", 2),
        ("revote", 3),
    ):
        ask = AskRequest(
            kind=TaskKind.ACTION,
            wire="test",
            scope="s1",
            action={"method": "m", "name": name, "arguments": {}},
            requester=Requester("agent-x", "olive"),
            approver_group="ops",
            question="ok?",
            timeout_s=600,
            approvals_required=required,
        )
        with rt.store.transaction() as tx:
            tasks[name] = rt.desk.file(tx, ask).id
    rt.desk.approve(tasks["half"], alice, "fine by me")
    # Carol's key is revoked and she votes again with a new one: the table keeps only the
    # new vote, the record both (the old one void).
    carol, _ = rt.api_keys.create("carol", Role.APPROVER, ["ops"])
    rt.desk.approve(tasks["revote"], carol, "yes, then revoked")
    rt.api_keys.revoke(carol.key_id)
    carol2, _ = rt.api_keys.create("carol", Role.APPROVER, ["ops"])
    assert rt.desk.approve(tasks["revote"], carol2, "again").state.value == "pending"
    rt.desk.approve(tasks["approved"], alice)
    rt.desk.deny(tasks["denied"], bob, "no")
    rt.desk.approve(tasks["rerouted"], alice)
    rt.desk.reroute(tasks["rerouted"], bob, "risk")
    rt.desk.approve(tasks["rerouted"], bob, "risk ok")
    return {
        "tasks": tasks,
        "held": held.id,
        "settled": settled.id,
        "receipt": receipt.id,
        "alice": alice.key_id,
    }


@pytest.fixture
def history(
    make_backend_runtime: Callable[..., Runtime], tmp_path: Path, database_url: str
) -> dict[str, Any]:
    rt = make_backend_runtime()
    state = _state_history(rt)
    sids = []
    for agent in ("agent-a", "agent-b"):
        c = service_client(rt, agent_id=agent)
        c.hello()
        c.call("steps/sessionStart", {})
        for i in range(3):
            assert "result" in c.tool_call("read_file", {"path": f"/tmp/{i}"})
        sids.append(c.session_id)
    assert rt.tlog is not None
    middle = rt.tlog.checkpoint()
    c = service_client(rt, agent_id="agent-c")
    c.hello()
    c.call("steps/sessionStart", {})
    assert "result" in c.tool_call("read_file", {"path": "/tmp/c"})
    sids.append(c.session_id)
    data_dir = rt.settings.data_dir
    rt.close()  # signs the shutdown checkpoint
    engine = _engine(database_url)
    final = tlog_sql.latest_checkpoint(engine)
    engine.dispose()
    assert final is not None and final.tree_size > middle.tree_size
    kept = tmp_path / "kept.checkpoint"
    kept.write_text(final.note, encoding="utf-8")
    return {
        "url": database_url,
        "data": data_dir,
        "sids": sids,
        "kept": kept,
        "middle": middle,
        **state,
    }


def _engine(url: str) -> Any:
    from warden.store.sql import _engine_for, parse_database_url

    return _engine_for(parse_database_url(url), "FULL")


def _verify(h: dict[str, Any], *, kept: bool = False) -> dict[str, Any]:
    return verify_chains(
        None,
        data_dir=h["data"],
        database_url=h["url"],
        key_file=h["data"] / "ikm.key",
        no_signatures=False,
        checkpoint=h["kept"] if kept else None,
    ).document


def _sql(h: dict[str, Any], *statements: str, **params: Any) -> None:
    engine = _engine(h["url"])
    try:
        with engine.begin() as conn:
            for s in statements:
                conn.execute(text(s), params)
    finally:
        engine.dispose()


def _one(h: dict[str, Any], sql: str, **params: Any) -> Any:
    engine = _engine(h["url"])
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar_one()
    finally:
        engine.dispose()


def test_the_untouched_history_verifies(history: dict[str, Any]) -> None:
    doc = _verify(history, kept=True)
    assert doc["ok"], doc
    assert doc["log"]["trusted_checkpoint"] == doc["log"]["leaves"]
    assert doc["log"]["checkpoint_signatures"] is True


def test_edit_an_entry(history: dict[str, Any]) -> None:
    sid = history["sids"][0]
    _sql(
        history,
        'UPDATE entries SET entry = REPLACE(entry, \'"timestamp":"2\', \'"timestamp":"1\') '
        "WHERE session_id = :s AND seq = 1",
        s=sid,
    )
    failure = _verify(history)["failure"]
    assert failure["reason"] == "record_hash_mismatch"
    assert (failure["session_id"], failure["seq"]) == (sid, 1)


def test_edit_an_event_leaf(history: dict[str, Any]) -> None:
    _sql(history, "UPDATE log_events SET event = REPLACE(event, '\"ops\"', '\"root\"')")
    failure = _verify(history)["failure"]
    assert failure["reason"] == "log_mismatch", failure


def test_delete_a_whole_session(history: dict[str, Any]) -> None:
    sid = history["sids"][1]
    first = _one(history, "SELECT MIN(log_index) FROM entries WHERE session_id = :s", s=sid)
    _sql(
        history,
        "DELETE FROM entries WHERE session_id = :s",
        "DELETE FROM replay_keys WHERE session_id = :s",
        "DELETE FROM sessions WHERE session_id = :s",
        s=sid,
    )
    failure = _verify(history)["failure"]
    assert failure["reason"] == "log_gap"
    assert failure["log_index"] == first
    assert f"leaf index {first} is missing" in failure["message"]


def test_insert_a_forged_leaf(history: dict[str, Any]) -> None:
    at = history["middle"].tree_size - 3
    _sql(
        history,
        "UPDATE entries SET log_index = log_index + 1000000 WHERE log_index >= :k",
        "UPDATE entries SET log_index = log_index - 999999 WHERE log_index >= 1000000",
        "UPDATE log_events SET log_index = log_index + 1000000 WHERE log_index >= :k",
        "UPDATE log_events SET log_index = log_index - 999999 WHERE log_index >= 1000000",
        "INSERT INTO log_events (log_index, kind, event, created_at) VALUES "
        "(:k, 'keys.revoked', '{\"kind\":\"keys.revoked\"}', 'now')",
        "UPDATE log_state SET next_index = next_index + 1",
        k=at,
    )
    failure = _verify(history)["failure"]
    assert failure["reason"] == "log_mismatch"


def test_swap_two_leaves(history: dict[str, Any]) -> None:
    a, b = history["sids"][:2]
    i = _one(history, "SELECT MIN(log_index) FROM entries WHERE session_id = :s", s=a)
    j = _one(history, "SELECT MIN(log_index) FROM entries WHERE session_id = :s", s=b)
    _sql(
        history,
        "UPDATE entries SET log_index = -1 WHERE log_index = :i",
        "UPDATE entries SET log_index = :i WHERE log_index = :j",
        "UPDATE entries SET log_index = :j WHERE log_index = -1",
        i=i,
        j=j,
    )
    failure = _verify(history)["failure"]
    assert failure["reason"] == "log_mismatch"
    assert failure["log_index"] <= i


def _drop_session_c(h: dict[str, Any]) -> int:
    sid = h["sids"][2]
    first = _one(h, "SELECT MIN(log_index) FROM entries WHERE session_id = :s", s=sid)
    _sql(
        h,
        "DELETE FROM entries WHERE session_id = :s",
        "DELETE FROM replay_keys WHERE session_id = :s",
        "DELETE FROM sessions WHERE session_id = :s",
        s=sid,
    )
    return int(first)


def test_truncate_the_tail(history: dict[str, Any]) -> None:
    first = _drop_session_c(history)
    # The counter and the signed checkpoints still say more: caught without a kept one.
    failure = _verify(history)["failure"]
    assert failure["reason"] == "log_truncated"
    assert failure["log_index"] == first


def test_roll_back_to_an_older_checkpoint(history: dict[str, Any]) -> None:
    first = _drop_session_c(history)
    _sql(
        history,
        "DELETE FROM log_events WHERE log_index >= :n",
        "DELETE FROM log_checkpoints WHERE tree_size > :m",
        "UPDATE log_state SET next_index = :n",
        n=first,
        m=history["middle"].tree_size,
    )
    assert _verify(history)["ok"]  # consistent in itself: only a kept checkpoint knows
    failure = _verify(history, kept=True)["failure"]
    assert failure["reason"] == "log_truncated"
    assert "kept checkpoint" in failure["message"]


def test_edit_a_state_table(history: dict[str, Any]) -> None:
    _sql(history, "UPDATE api_keys SET role = 'admin' WHERE principal = 'alice'")
    failure = _verify(history)["failure"]
    assert failure["reason"] == "state_mismatch"
    assert "role is 'admin'" in failure["message"] and "'approver'" in failure["message"]


def test_an_entry_that_is_no_leaf(history: dict[str, Any]) -> None:
    _sql(history, "UPDATE entries SET log_index = NULL WHERE log_index = 5")
    failure = _verify(history)["failure"]
    assert failure["reason"] == "log_unindexed"


# -- state tables: each edit behind the chains is one state_mismatch naming the row ----------


def _state_failure(history: dict[str, Any], *statements: str, **params: Any) -> dict[str, Any]:
    _sql(history, *statements, **params)
    failure = _verify(history)["failure"]
    assert failure["reason"] == "state_mismatch", failure
    return failure


def _rows(failure: dict[str, Any]) -> list[str]:
    return [f"{r['table']}:{r['row']}" for r in failure["rows"]]


def test_flip_a_task_to_approved(history: dict[str, Any]) -> None:
    task = history["tasks"]["pending"]
    failure = _state_failure(
        history,
        "UPDATE tasks SET state = 'approved', status = 'completed', "
        'record = REPLACE(REPLACE(record, \'"state":"pending"\', \'"state":"approved"\'), '
        '\'"status":"input_required"\', \'"status":"completed"\') WHERE task_id = :t',
        t=task,
    )
    assert _rows(failure) == [f"tasks:{task}"]
    assert failure["message"].startswith(f"tasks row {task}: state is 'approved'")
    assert "says 'pending'" in failure["message"]
    assert isinstance(failure["log_index"], int)


def test_a_forged_vote_completes_a_task(history: dict[str, Any]) -> None:
    task = history["tasks"]["half"]
    failure = _state_failure(
        history,
        "INSERT INTO approval_votes (task_id, principal, key_id, decision, reason, at) "
        "VALUES (:t, 'mallory', 'key_x', 'approve', '', 'now')",
        t=task,
    )
    assert _rows(failure) == [f"approval_votes:{task}/mallory"]
    assert "no leaf explains it" in failure["message"]
    assert failure["log_index"] is None


def test_a_deleted_vote_and_an_undone_reroute(history: dict[str, Any]) -> None:
    half, rerouted = history["tasks"]["half"], history["tasks"]["rerouted"]
    failure = _state_failure(
        history,
        "DELETE FROM approval_votes WHERE task_id = :half",
        "UPDATE tasks SET approver_group = 'ops' WHERE task_id = :rerouted",
        half=half,
        rerouted=rerouted,
    )
    assert set(_rows(failure)) == {f"tasks:{rerouted}", f"approval_votes:{half}/alice"}


def test_a_timeout_disposition_flipped_to_allow(history: dict[str, Any]) -> None:
    task = history["tasks"]["pending"]
    failure = _state_failure(
        history,
        'UPDATE tasks SET record = REPLACE(record, \'"timeout_disposition":"deny"\', '
        '\'"timeout_disposition":"allow"\') WHERE task_id = :t',
        t=task,
    )
    assert "record.timeout_disposition is 'allow'" in failure["message"]


def test_a_task_no_request_filed(history: dict[str, Any]) -> None:
    task = history["tasks"]["approved"]
    failure = _state_failure(
        history,
        "INSERT INTO tasks (task_id, kind, status, record, created_at, updated_at, state, "
        "action_hash, session_id, expires_at, approver_group) SELECT 'task_forged', kind, "
        "status, record, created_at, updated_at, state, action_hash, session_id, expires_at, "
        "approver_group FROM tasks WHERE task_id = :t",
        t=task,
    )
    assert _rows(failure) == ["tasks:task_forged"]


def test_enable_a_revoked_agent(history: dict[str, Any]) -> None:
    failure = _state_failure(
        history,
        "UPDATE agents SET revoked_at = NULL WHERE agent_id = 'agent-gone'",
        "UPDATE agent_keys SET revoked_at = NULL WHERE agent_id = 'agent-gone'",
    )
    rows = _rows(failure)
    assert rows[0] == "agents:agent-gone"
    assert len(rows) == 2 and rows[1].startswith("agent_keys:agk_")
    assert "revoked is False" in failure["message"] and "says True" in failure["message"]


def test_raise_an_agents_groups_and_re_enable_its_api_key(history: dict[str, Any]) -> None:
    failure = _state_failure(
        history,
        "UPDATE agents SET groups = '[\"ops\", \"admins\"]' WHERE agent_id = 'agent-x'",
        "UPDATE api_keys SET revoked_at = NULL WHERE principal = 'agent-gone'",
    )
    rows = _rows(failure)
    assert rows[0].startswith("api_keys:") and rows[1] == "agents:agent-x"
    by_row = {r["row"]: r["message"] for r in failure["rows"]}
    assert "groups is ['ops', 'admins']" in by_row["agent-x"]


def test_an_old_agent_key_made_active_again(history: dict[str, Any]) -> None:
    failure = _state_failure(
        history,
        "UPDATE agent_keys SET revoked_at = NULL WHERE agent_id = 'agent-x'",
    )
    assert [r["table"] for r in failure["rows"]] == ["agent_keys"]


def test_edit_a_budget_cap(history: dict[str, Any]) -> None:
    failure = _state_failure(
        history, "UPDATE budgets SET cap = '1000000' WHERE budget_id = 'team-1'"
    )
    assert _rows(failure) == ["budgets:team-1"]
    assert "cap is '1000000', the log" in failure["message"] and "says '600'" in failure["message"]


def test_wipe_usage(history: dict[str, Any]) -> None:
    failure = _state_failure(history, "DELETE FROM budget_usage")
    rows = _rows(failure)
    assert rows and all(r.startswith("budget_usage:") for r in rows)
    assert {r.split(":", 1)[1].split("/")[0] for r in rows} == {"org-1", "team-1"}
    assert "is gone" in failure["message"]


def test_zero_usage(history: dict[str, Any]) -> None:
    failure = _state_failure(history, "UPDATE budget_usage SET reserved = '0', settled = '0'")
    assert "reserved is '0'" in failure["message"]


def test_delete_a_hold(history: dict[str, Any]) -> None:
    held = history["held"]
    failure = _state_failure(history, "DELETE FROM reservations WHERE reservation_id = :r", r=held)
    assert _rows(failure) == [f"reservations:{held}"]
    assert "is gone" in failure["message"]


def test_alter_a_hold(history: dict[str, Any]) -> None:
    held = history["held"]
    failure = _state_failure(
        history,
        "UPDATE reservations SET status = 'released', record = REPLACE(record, "
        '\'"status":"held"\', \'"status":"released"\') WHERE reservation_id = :r',
        r=held,
    )
    assert _rows(failure) == [f"reservations:{held}"]
    assert "status is 'released'" in failure["message"]


def test_a_receipt_undone_by_hand(history: dict[str, Any]) -> None:
    receipt = history["receipt"]
    failure = _state_failure(
        history,
        "UPDATE receipts SET record = REPLACE(record, :was, :now) WHERE receipt_id = :r",
        was='"undone_at":null',
        now='"undone_at":"2026-01-01T00:00:00+00:00"',
        r=receipt,
    )
    assert _rows(failure) == [f"receipts:{receipt}"]
