"""Exact idempotency (specs/adcp-spend-kla.md §1.5), after the storyboard
``universal/idempotency.yaml`` with Warden's mutating tasks (``sync_plans``,
``check_governance`` with a key, ``report_plan_outcome``) in place of create_media_buy,
over a real server. Phases: capability declaration, missing key, replay, conflict without
leak, fresh key, concurrent duplicates (one effect), errors never cached, expiry."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from adcp_helpers import Clock, Live, adcp_entries, intent, live, plan
from conftest import DEFAULT_POLICY, write_key

from warden.adcp.state import budget_id_for
from warden.runtime import Runtime
from warden.settings import Settings
from warden.spend.budgets import Period, period_key

VOLATILE = ("timestamp", "context", "replayed")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def srv(tmp_path: Any, clock: Clock, database_url: str) -> Iterator[Live]:
    """A server on SQLite and on PostgreSQL (``database_url`` is parametrized)."""
    data = tmp_path / "data"
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=DEFAULT_POLICY,
            key_file=write_key(data / "ikm.key"),
            idempotency_ttl_seconds=3600,
            database_url=database_url,
        )
    )
    try:
        with live(rt, clock) as s:
            yield s
    finally:
        rt.close()


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k not in VOLATILE} == {
        k: v for k, v in b.items() if k not in VOLATILE
    }


def held(srv: Live, plan_id: str, principal: str = "buyer-agent") -> Any:
    with srv.rt.store.transaction() as tx:
        return tx.usage(
            budget_id_for(principal, plan_id), period_key(Period.NONE, srv.rt.spend.now())
        )[0]


def test_idempotency_storyboard(srv: Live) -> None:
    caps = srv.rest().call("get_adcp_capabilities", {"context": {"correlation_id": "caps"}})
    assert caps.body["adcp"]["idempotency"] == {"supported": True, "replay_ttl_seconds": 3600}

    # missing_key: rejected, nothing created.
    r = srv.rest().call("sync_plans", {"plans": [plan("idem")], "context": {"correlation_id": "m"}})
    assert r.code == "INVALID_REQUEST" and r.body["adcp_error"]["recovery"] == "correctable"
    assert r.body["context"] == {"correlation_id": "m"}
    assert srv.rest().call("get_plan_audit_logs", {"plan_ids": ["idem"]}).body["plans"] == []

    # replay_same_payload: same answer, replayed, no second effect (whatever the context).
    key = str(uuid.uuid4())
    body = {"idempotency_key": key, "plans": [plan("idem", total=1000)]}
    first = srv.rest().call("sync_plans", {**body, "context": {"correlation_id": "one"}})
    assert first.status == 200 and first.body["replayed"] is False
    replay = srv.rest().call("sync_plans", {**body, "context": {"correlation_id": "two"}})
    assert replay.body["replayed"] is True and same(first.body, replay.body)
    assert replay.body["context"] == {"correlation_id": "two"}
    assert [e["step_type"] for e in adcp_entries(srv.rt)] == ["warden/adcp.plan_synced"]

    # key_reuse_conflict: a different payload under the key; nothing of the first leaks.
    changed = {"idempotency_key": key, "plans": [plan("idem", total=2000)]}
    conflict = srv.rest().call("sync_plans", changed)
    assert conflict.code == "IDEMPOTENCY_CONFLICT" and conflict.status == 409
    assert set(conflict.body["adcp_error"]) <= {"code", "message", "recovery"}
    shown = {k: v for k, v in conflict.body.items() if k not in ("context_id", "timestamp")}
    assert "plans" not in shown and "1000" not in json.dumps(shown)
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["idem"]}).body["plans"][0]
    assert logs["budget"]["authorized"] == 1000  # the conflicting payload did nothing

    # fresh_key: a new key is a new request, even with an identical payload.
    check = intent("idem", 100)
    a = srv.rest().call("check_governance", {**check, "idempotency_key": str(uuid.uuid4())})
    b = srv.rest().call("check_governance", {**check, "idempotency_key": str(uuid.uuid4())})
    assert a.body["check_id"] != b.body["check_id"]
    assert held(srv, "idem") == 200

    # The same key by another agent is another scope: its own effect, no conflict.
    other = srv.key("other-agent", "agent")
    mine = srv.rest(other).call(
        "sync_plans", {"idempotency_key": key, "plans": [plan("idem", total=5)]}
    )
    assert mine.status == 200 and mine.body["replayed"] is False

    # report_plan_outcome: replayed, settled once.
    out = {
        "idempotency_key": str(uuid.uuid4()),
        "plan_id": "idem",
        "check_id": a.body["check_id"],
        "governance_context": a.body["governance_context"],
        "outcome": "completed",
        "seller_response": {"committed_budget": 100},
    }
    o1 = srv.rest().call("report_plan_outcome", out)
    o2 = srv.rest().call("report_plan_outcome", out)
    assert o2.body["replayed"] is True and o1.body["outcome_id"] == o2.body["outcome_id"]
    assert held(srv, "idem") == 100  # b still held; a settled once
    # The one store serves both wires: AdCP scopes beside the spend wire's.
    with srv.rt.store.engine.connect() as conn:
        scopes = [r[0] for r in conn.exec_driver_sql("SELECT scope FROM idempotency_keys")]
    assert scopes and all(s.startswith("adcp:") for s in scopes)


def test_errors_are_never_cached(srv: Live) -> None:
    req = {**intent("later", 50), "idempotency_key": str(uuid.uuid4())}
    assert srv.rest().call("check_governance", req).code == "PLAN_NOT_FOUND"
    srv.rest().call("sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": [plan("later")]})
    again = srv.rest().call("check_governance", req)
    assert again.body["verdict"] == "approved" and again.body["replayed"] is False


def test_expired_key_is_refused_not_rerun(srv: Live, clock: Clock) -> None:
    body = {"idempotency_key": str(uuid.uuid4()), "plans": [plan("ttl")]}
    assert srv.rest().call("sync_plans", body).status == 200
    clock.advance(seconds=3600 + 1)
    r = srv.rest().call("sync_plans", body)
    assert r.code == "IDEMPOTENCY_EXPIRED" and r.body["adcp_error"]["recovery"] == "correctable"
    assert [e["step_type"] for e in adcp_entries(srv.rt)] == ["warden/adcp.plan_synced"]


def test_concurrent_duplicates_have_exactly_one_effect(srv: Live) -> None:
    srv.rest().call(
        "sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": [plan("race", total=10_000)]}
    )
    req = {**intent("race", 700), "idempotency_key": str(uuid.uuid4())}
    barrier = threading.Barrier(8)
    replies: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send() -> None:
        import httpx

        with httpx.Client(base_url=srv.url, timeout=60) as client:
            from adcp_helpers import Rest

            barrier.wait()
            r = Rest(client, srv.agent_token).call("check_governance", req)
        with lock:
            replies.append(r.body)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(replies) == 8
    assert len({r["check_id"] for r in replies}) == 1, replies
    assert sorted(r["replayed"] for r in replies) == [False] + [True] * 7
    assert held(srv, "race") == 700  # one hold, not eight
    checks = [e for e in adcp_entries(srv.rt) if e["step_type"] == "warden/adcp.check"]
    assert len(checks) == 1


def test_rate_limited_is_never_cached(srv: Live) -> None:
    """The storyboard's rate_limit_replay_invariant: trip the insert-rate limiter with
    fresh keys, wait retry_after, replay the tripped key: the handler runs."""
    from warden.adcp.rate_limit import InsertRateLimiter

    now = [0.0]
    assert srv.rt.adcp is not None
    srv.rt.adcp.rate_limiter = InsertRateLimiter(writes=(0.5, 2), clock=lambda: now[0])
    bodies = [{"idempotency_key": str(uuid.uuid4()), "plans": [plan(f"rl-{i}")]} for i in range(3)]
    assert [srv.rest().call("sync_plans", b).status for b in bodies[:2]] == [200, 200]
    tripped = srv.rest().call("sync_plans", bodies[2])
    assert tripped.code == "RATE_LIMITED" and tripped.status == 429
    assert tripped.body["adcp_error"]["retry_after"] == 2
    assert tripped.body["adcp_error"]["recovery"] == "transient"
    # A replay inserts nothing, so it is not limited.
    assert srv.rest().call("sync_plans", bodies[0]).body["replayed"] is True
    now[0] += 2  # retry_after elapsed
    replay = srv.rest().call("sync_plans", bodies[2])
    assert replay.status == 200 and replay.body["replayed"] is False
    assert replay.body["plans"][0]["plan_id"] == "rl-2"
