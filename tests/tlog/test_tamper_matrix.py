"""The tamper matrix of issue 17 on both backends: each tampering with a stopped
Warden's database (no key needed) is caught by ``warden verify``'s check
(:func:`warden.cli_ledger.verify_chains`), at the right place.

The history: sessions A, B and C of real ACS decisions and an approver key. A client
kept the checkpoint signed at shutdown (``kept``); C's leaves are the newest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import service_client
from sqlalchemy import text

from warden.cli_ledger import verify_chains
from warden.runtime import Runtime
from warden.store import tlog_sql


@pytest.fixture
def history(
    make_backend_runtime: Callable[..., Runtime], tmp_path: Path, database_url: str
) -> dict[str, Any]:
    rt = make_backend_runtime()
    sids = []
    for agent in ("agent-a", "agent-b"):
        c = service_client(rt, agent_id=agent)
        c.hello()
        c.call("steps/sessionStart", {})
        for i in range(3):
            assert "result" in c.tool_call("read_file", {"path": f"/tmp/{i}"})
        sids.append(c.session_id)
    rt.api_keys.create("alice", "approver", ["ops"])
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
    return {"url": database_url, "data": data_dir, "sids": sids, "kept": kept, "middle": middle}


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
