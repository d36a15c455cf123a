"""The same budgets govern ACS (issue 3 item 6), through the real ACS service: a priced
tool call holds its cost before it is allowed, its result settles or releases the hold,
a call that does not fit is a signed deny ``budget_exceeded``, the entries carry it all,
holds survive a restart and expire, a hold whose entry did not commit is released, and
`warden verify` is clean afterwards. Bundle: tests/assets/policy/spend_policy.yaml."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from conftest import TEST_IKM, assert_valid_response, asset, service_client
from sqlalchemy import text

from warden.errors import HeadMoved, StoreUnavailable
from warden.ledger.ledger import Ledger
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.spend import Budget, BudgetKind, HoldStatus, Period, SpendEngine
from warden.spend.audit import SpendAuditor
from warden.store.base import PendingAppend
from warden.store.group_commit import GroupCommitter
from warden.wire.acs.client import AcsClient

SPEND_POLICY = asset("policy/spend_policy.yaml")
AGENT = "shop.ops.shopper"


def define_shop(rt: Runtime) -> None:
    """shop (org, 1000 USD) ⊃ shop.ops (team, 150) ⊃ two agents of 100 USD each."""
    rt.spend.define_budget(Budget("shop", BudgetKind.ORG, "USD", Decimal(1000), Period.NONE))
    rt.spend.define_budget(
        Budget("shop.ops", BudgetKind.TEAM, "USD", Decimal(150), Period.NONE, parent_id="shop")
    )
    for agent in (AGENT, AGENT + "-2"):
        rt.spend.define_budget(
            Budget(agent, BudgetKind.AGENT, "USD", Decimal(100), Period.NONE, parent_id="shop.ops")
        )


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime(policy=SPEND_POLICY)
    define_shop(runtime)
    return runtime


def agent(rt: Runtime, name: str = "shopper", **kw: Any) -> AcsClient:
    c = service_client(rt, agent_id=name, **kw)
    c.hello()
    assert c.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    return c


def ok(resp: dict[str, Any]) -> dict[str, Any]:
    """The result of a response that validates against the ACS response schema."""
    assert_valid_response(resp)
    assert "result" in resp, resp
    result: dict[str, Any] = resp["result"]
    return result


def tool_call(
    c: AcsClient, name: str, args: dict[str, Any], method: str = "steps/toolCallRequest"
) -> tuple[str, dict[str, Any]]:
    """(request_id, result) of one tool call."""
    if method == "steps/toolCallRequest":
        payload: dict[str, Any] = {
            "tool": {"name": name},
            "arguments": {k: {"value": v} for k, v in args.items()},
        }
    else:
        payload = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": name, "arguments": args},
        }
    env = c.envelope(method, payload)
    return env["params"]["request_id"], ok(c.send(env))


def tool_result(
    c: AcsClient,
    ref: str | None,
    status: str,
    outputs: list[Any] | None = None,
    tool: str = "pay",
) -> tuple[str, dict[str, Any]]:
    payload: dict[str, Any] = {
        "tool": {"name": tool},
        "exit_status": status,
        "outputs": [{"value": o} for o in outputs or []],
    }
    if ref is not None:
        payload["request_id_ref"] = ref
    env = c.envelope("steps/toolCallResult", payload)
    return env["params"]["request_id"], ok(c.send(env))


def left(rt: Runtime, budget: str = AGENT) -> Decimal:
    return rt.spend.remaining(budget)[0]


def holds(rt: Runtime) -> list[dict[str, Any]]:
    """Every reservation record, oldest first (read without expiring anything)."""
    with rt.store.engine.connect() as conn:
        rows = conn.execute(text("SELECT record FROM reservations ORDER BY rowid")).all()
    return [json.loads(r[0]) for r in rows]


def spend_events(rt: Runtime) -> list[str]:
    with rt.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT step_type FROM entries WHERE step_type LIKE 'warden/spend.%' ORDER BY rowid"
            )
        ).all()
    return [r[0].removeprefix("warden/spend.") for r in rows]


def entry(rt: Runtime, c: AcsClient, step_id: str) -> dict[str, Any]:
    found = rt.store.step_entry(c.session_id, step_id)
    assert found is not None
    return found


def pay(c: AcsClient, amount: Any, currency: str = "USD") -> tuple[str, dict[str, Any]]:
    return tool_call(c, "pay", {"amount": amount, "currency": currency})


# -- reserve ---------------------------------------------------------------------------


def test_priced_call_reserves_and_the_entry_carries_the_reservation(rt: Runtime) -> None:
    c = agent(rt)
    rid, result = pay(c, "40.50")
    assert result["decision"] == "allow"
    spend = result["policy_data"]["spend"]
    assert spend.keys() == {
        "charge",
        "reservation_id",
        "budget_id",
        "amount",
        "currency",
        "expires_at",
    }
    assert (spend["charge"], spend["budget_id"], spend["amount"], spend["currency"]) == (
        "payments",
        AGENT,
        "40.50",
        "USD",
    )
    res = rt.spend.reservation(spend["reservation_id"])
    assert (res.status, res.amount, res.currency, res.budget_id) == (
        HoldStatus.HELD,
        Decimal("40.50"),
        "USD",
        AGENT,
    )
    assert res.path == (AGENT, "shop.ops", "shop")
    assert res.meta == {
        "wire": "acs",
        "session_id": c.session_id,
        "request_id": rid,
        "tool": "pay",
        "charge": "payments",
    }
    assert res.expires_at - res.created_at == timedelta(seconds=60)  # the charge's hold_seconds
    assert spend["expires_at"] == res.expires_at.isoformat()
    assert left(rt) == Decimal("59.50")
    assert left(rt, "shop.ops") == Decimal("109.50")
    stored = entry(rt, c, rid)
    assert stored["entry_hash"] == result["chain_hash"]
    assert stored["verdict"]["spend"] == spend
    assert stored["verdict"]["decision"] == "allow"


def test_unpriced_calls_hold_nothing(rt: Runtime) -> None:
    c = agent(rt)
    rid, result = tool_call(c, "lookup", {"amount": 5})
    assert result["decision"] == "allow" and "spend" not in result.get("policy_data", {})
    assert "spend" not in entry(rt, c, rid)["verdict"]
    assert holds(rt) == [] and left(rt) == 100


def test_modify_is_priced_as_it_will_run(rt: Runtime) -> None:
    c = agent(rt)
    rid, result = tool_call(c, "buy", {"quantity": 8})
    assert result["decision"] == "modify"
    assert result["modifications"] == {"parameter_overrides": {"quantity": 5}}
    assert result["policy_data"]["spend"]["amount"] == "50"  # 5 × 10, not 8 × 10
    assert left(rt) == 50


@pytest.mark.parametrize(
    ("tool", "args", "decision", "reason"),
    [
        ("pay", {"amount": 5, "currency": "USD", "refund": True}, "ask", None),
        ("unknown_tool", {"amount": 5}, "deny", "no_rule_matched"),
    ],
)
def test_ask_and_deny_hold_nothing(
    rt: Runtime, tool: str, args: dict[str, Any], decision: str, reason: str | None
) -> None:
    c = agent(rt)
    rid, result = tool_call(c, tool, args)
    assert result["decision"] == decision
    assert "spend" not in result.get("policy_data", {})
    assert "spend" not in entry(rt, c, rid)["verdict"]
    assert holds(rt) == [] and left(rt) == 100


# -- over budget and unpriceable calls ---------------------------------------------------


def test_over_budget_is_a_signed_deny_with_the_budget_in_policy_data(rt: Runtime) -> None:
    c = agent(rt)
    pay(c, "40.50")
    events = len(spend_events(rt))
    # AcsClient.send raises IntegrityError unless the deny's signature verifies.
    rid, result = pay(c, 70)
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["budget_exceeded"]
    assert result["policy_data"]["budget"] == {
        "budget_id": AGENT,
        "limit": "100",
        "requested": "70",
        "currency": "USD",
        "available": "59.50",
        "charge": "payments",
    }
    assert "59.50 of 100 USD" in result["reasoning"]
    assert [r["rule_id"] for r in result["policy_references"]] == ["tools"]
    assert result["signature"]["algorithm"] == "HMAC-SHA256"
    stored = entry(rt, c, rid)
    assert stored["entry_hash"] == result["chain_hash"]
    assert stored["verdict"]["decision"] == "deny"
    assert stored["verdict"]["spend"] == {
        "charge": "payments",
        "budget_id": AGENT,
        "amount": "70",
        "currency": "USD",
        "refused": "budget_exceeded",
        "blocking_budget_id": AGENT,
        "limit": "100",
        "available": "59.50",
    }
    assert len(holds(rt)) == 1 and left(rt) == Decimal("59.50")
    assert spend_events(rt)[events:] == ["refused"]
    _, fits = pay(c, "59.50")
    assert fits["decision"] == "allow" and left(rt) == 0


def test_the_tightest_budget_on_the_path_refuses(rt: Runtime) -> None:
    first, second = agent(rt), agent(rt, "shopper-2")
    assert pay(first, 100)[1]["decision"] == "allow"
    _, result = pay(second, 60)  # fits shopper-2 (100) but not the team (150 − 100)
    assert result["reason_codes"] == ["budget_exceeded"]
    assert result["policy_data"]["budget"]["budget_id"] == "shop.ops"
    assert result["policy_data"]["budget"]["limit"] == "150"
    assert result["policy_data"]["budget"]["available"] == "50"
    assert left(rt, AGENT + "-2") == 50


@pytest.mark.parametrize(
    ("tool", "args", "agent_id", "reason"),
    [
        ("orphan", {}, "shopper", "unknown_budget"),
        ("pay", {"amount": 5, "currency": "EUR"}, "shopper", "currency_mismatch"),
        ("pay", {"amount": -5, "currency": "USD"}, "shopper", "invalid_amount"),
        ("pay", {"amount": 5, "currency": "dollars"}, "shopper", "invalid_currency"),
        ("pay", {"amount": 5, "currency": "USD"}, "misconfigured", "invalid_budget"),
    ],
)
def test_a_call_that_cannot_be_charged_is_denied_with_the_reason(
    rt: Runtime, tool: str, args: dict[str, Any], agent_id: str, reason: str
) -> None:
    c = agent(rt, agent_id)
    rid, result = tool_call(c, tool, args)
    assert (result["decision"], result["reason_codes"]) == ("deny", [reason])
    assert result["policy_data"]["spend"]["refused"] == reason
    assert entry(rt, c, rid)["verdict"]["spend"]["refused"] == reason
    assert "failure" not in entry(rt, c, rid)
    assert holds(rt) == []


def test_expression_error_fails_closed_with_detail_only_in_the_ledger(rt: Runtime) -> None:
    c = agent(rt)
    rid, result = tool_call(c, "pay", {"currency": "USD"})
    assert (result["decision"], result["reason_codes"]) == ("deny", ["evaluation_failed"])
    assert result["reasoning"].endswith("(fail closed).")
    assert "KeyError" not in json.dumps(result)
    stored = entry(rt, c, rid)
    assert "charge payments: amount: evaluation failed" in stored["failure"]
    assert holds(rt) == []


# -- settle and release ------------------------------------------------------------------


def test_success_settles_and_the_result_entry_records_it(rt: Runtime) -> None:
    c = agent(rt)
    ref, req = pay(c, "40.50")
    hold = req["policy_data"]["spend"]["reservation_id"]
    rid, result = tool_result(c, ref, "success", [{"status": "sent"}])
    assert result["decision"] == "allow"
    spend = result["policy_data"]["spend"]
    assert spend["outcome"] == "settled" and spend["amount"] == "40.50"
    assert spend["reserved"] == "40.50" and spend["reservation_id"] == hold
    assert "flagged" not in spend
    res = rt.spend.reservation(hold)
    assert (res.status, res.settled_amount, res.receipt_id) == (
        HoldStatus.SETTLED,
        Decimal("40.50"),
        spend["receipt_id"],
    )
    assert rt.spend.receipt(spend["receipt_id"]).amount == Decimal("40.50")
    assert left(rt) == Decimal("59.50")
    assert entry(rt, c, rid)["verdict"]["spend"] == spend
    # A second result for the same request settles nothing twice.
    _, again = tool_result(c, ref, "success")
    assert again["policy_data"]["spend"]["outcome"] == "not_held"
    assert again["policy_data"]["spend"]["status"] == "settled"
    assert left(rt) == Decimal("59.50")


@pytest.mark.parametrize(
    ("output", "settled", "flag"),
    [
        ({"charged": "30"}, "30", None),
        ({"charged": 12.25}, "12.25", None),
        ({"charged": "0"}, "0", None),
        ({"status": "sent"}, "40.50", None),  # no charged field: the reserved amount
        ({"charged": "41"}, "40.50", "settlement_exceeds_reservation"),
        ({"charged": "-3"}, "40.50", "actual_invalid"),
    ],
)
def test_actual_amount_from_the_result(
    rt: Runtime, output: dict[str, Any], settled: str, flag: str | None
) -> None:
    c = agent(rt)
    ref, _ = pay(c, "40.50")
    _, result = tool_result(c, ref, "success", [output])
    spend = result["policy_data"]["spend"]
    assert spend["outcome"] == "settled" and spend["amount"] == settled
    assert spend.get("flagged") == flag
    if flag == "settlement_exceeds_reservation":
        assert spend["claimed"] == "41"
        assert "settle_refused" in spend_events(rt)
    assert left(rt) == Decimal(100) - Decimal(settled)
    assert holds(rt)[0]["status"] == "settled"


@pytest.mark.parametrize("status", ["failure", "timeout", "blocked"])
def test_failure_timeout_blocked_release(rt: Runtime, status: str) -> None:
    c = agent(rt)
    ref, req = pay(c, "40.50")
    rid, result = tool_result(c, ref, status)
    spend = result["policy_data"]["spend"]
    assert (spend["outcome"], spend["reason"]) == ("released", f"tool_{status}")
    res = rt.spend.reservation(req["policy_data"]["spend"]["reservation_id"])
    assert (res.status, res.reason) == (HoldStatus.RELEASED, f"tool_{status}")
    assert left(rt) == 100
    assert entry(rt, c, rid)["verdict"]["spend"] == spend


def test_results_without_a_hold_change_nothing(rt: Runtime) -> None:
    c = agent(rt)
    held_ref, _ = pay(c, 10)
    denied_ref, denied = pay(c, 500)
    assert denied["decision"] == "deny"
    free_ref, _ = tool_call(c, "lookup", {})
    before = (holds(rt), spend_events(rt))
    for ref, status in [
        (denied_ref, "blocked"),
        (free_ref, "success"),
        ("3f2b8a64-0000-4000-8000-000000000000", "success"),  # no such request
        (None, "success"),  # no request_id_ref at all
    ]:
        rid, result = tool_result(c, ref, status)
        assert result["decision"] == "allow" and "spend" not in result.get("policy_data", {})
        assert "spend" not in entry(rt, c, rid)["verdict"]
    assert (holds(rt), spend_events(rt)) == before
    # A result must name a tool the bundle prices: one for another tool is not looked up.
    _, result = tool_result(c, held_ref, "failure", tool="lookup")
    assert "spend" not in result.get("policy_data", {}) and holds(rt)[0]["status"] == "held"
    # Another session cannot conclude this session's hold by naming its request id.
    other = agent(rt)
    _, result = tool_result(other, held_ref, "failure")
    assert "spend" not in result.get("policy_data", {})
    assert holds(rt)[0]["status"] == "held" and left(rt) == 90


def test_an_entry_edited_to_name_another_sessions_hold_settles_nothing(rt: Runtime) -> None:
    """Defence in depth: a hold is concluded only by its own session's request."""
    victim, attacker = agent(rt), agent(rt)
    _, held = pay(victim, 30)
    ref, own = pay(attacker, 5)
    theirs = held["policy_data"]["spend"]["reservation_id"]
    mine = own["policy_data"]["spend"]["reservation_id"]
    with rt.store.engine.begin() as conn:  # an edit behind Warden's back
        conn.execute(
            text("UPDATE entries SET entry = replace(entry, :mine, :theirs) WHERE step_id = :ref"),
            {"mine": mine, "theirs": theirs, "ref": ref},
        )
    _, result = tool_result(attacker, ref, "success")
    assert result["policy_data"]["spend"] == {
        "reservation_id": theirs,
        "outcome": "not_this_request",
    }
    assert [h["status"] for h in holds(rt)] == ["held", "held"]


def test_wrapped_mcp_tools_call_reserves_and_a_tool_result_settles_it(rt: Runtime) -> None:
    c = agent(rt)
    ref, req = tool_call(c, "pay", {"amount": "3", "currency": "USD"}, "protocols/MCP/tools/call")
    assert req["decision"] == "allow" and req["policy_data"]["spend"]["amount"] == "3"
    assert left(rt) == 97
    _, result = tool_result(c, ref, "success")
    assert result["policy_data"]["spend"]["outcome"] == "settled"
    assert left(rt) == 97


# -- ordering: a hold is never leaked by an entry that did not commit ----------------------


def _fail_first_tool_call(
    rt: Runtime,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    step_type: str = "steps/toolCallRequest",
) -> list[int]:
    real = rt.store.append_many
    failed: list[int] = []

    def flaky(items: list[PendingAppend]) -> list[Exception | None]:
        if not failed and any(i.entry["step_type"] == step_type for i in items):
            failed.append(1)
            return [error for _ in items]
        return real(items)

    monkeypatch.setattr(rt.store, "append_many", flaky)
    return failed


def test_entry_commit_failure_releases_the_hold(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = agent(rt)
    failed = _fail_first_tool_call(rt, monkeypatch, StoreUnavailable("disk full"))
    _, result = pay(c, 25)
    assert failed
    assert (result["decision"], result["reason_codes"]) == ("deny", ["store_unavailable"])
    assert "chain_hash" not in result
    [hold] = holds(rt)
    assert (hold["status"], hold["reason"]) == ("released", "entry_not_committed")
    assert left(rt) == 100
    assert spend_events(rt)[-2:] == ["reserve", "release"]


def test_lost_head_race_releases_and_holds_again(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = agent(rt)
    _fail_first_tool_call(rt, monkeypatch, HeadMoved("another writer won"))
    rid, result = pay(c, 25)
    assert result["decision"] == "allow"
    first, second = holds(rt)
    assert (first["status"], first["reason"]) == ("released", "entry_not_committed")
    assert second["status"] == "held"
    assert result["policy_data"]["spend"]["reservation_id"] == second["id"]
    assert entry(rt, c, rid)["verdict"]["spend"]["reservation_id"] == second["id"]
    assert left(rt) == 75


def test_a_result_retried_after_a_lost_head_race_records_its_settlement(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = agent(rt)
    ref, _ = pay(c, 25)
    failed = _fail_first_tool_call(
        rt, monkeypatch, HeadMoved("another writer won"), "steps/toolCallResult"
    )
    rid, result = tool_result(c, ref, "success")
    assert failed
    spend = result["policy_data"]["spend"]
    assert (spend["outcome"], spend["amount"]) == ("settled", "25")  # not "not_held"
    assert entry(rt, c, rid)["verdict"]["spend"] == spend
    assert spend_events(rt).count("settle") == 1 and left(rt) == 75


def test_lost_head_race_through_the_group_committer(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's path: handle_async with group commit releases the same way, and
    the holds are taken off the event loop's thread (a reservation waits for the disk)."""
    c = agent(rt)
    _fail_first_tool_call(rt, monkeypatch, HeadMoved("another writer won"))
    threads: list[str] = []
    reserve, release = rt.spend.reserve, rt.spend.release

    def on_thread(real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **kw: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real(*a, **kw)

        return wrapped

    monkeypatch.setattr(rt.spend, "reserve", on_thread(reserve))
    monkeypatch.setattr(rt.spend, "release", on_thread(release))
    env = c.envelope(
        "steps/toolCallRequest",
        {
            "tool": {"name": "pay"},
            "arguments": {"amount": {"value": 25}, "currency": {"value": "USD"}},
        },
    )
    body = json.dumps(env).encode()

    async def run() -> dict[str, Any]:
        committer = GroupCommitter(rt.store)
        try:
            return await rt.acs.handle_async(body, committer)
        finally:
            committer.close()

    loop_thread = threading.current_thread().name  # asyncio.run runs the loop here
    result = ok(asyncio.run(run()))
    assert result["decision"] == "allow"
    assert [h["status"] for h in holds(rt)] == ["released", "held"]
    assert len(threads) == 3 and loop_thread not in threads  # reserve, release, reserve
    assert left(rt) == 75


def test_a_replayed_priced_call_holds_nothing(rt: Runtime) -> None:
    # Without chain tracking the replay's claimed head cannot give it away (chain_mismatch):
    # it reaches the gate, which must not hold anything for it.
    c = agent(rt, track_chain=False)
    env = c.envelope(
        "steps/toolCallRequest",
        {
            "tool": {"name": "pay"},
            "arguments": {"amount": {"value": 25}, "currency": {"value": "USD"}},
        },
    )
    assert ok(c.send(env))["decision"] == "allow"
    events = spend_events(rt)
    replayed = c.send(env)
    assert_valid_response(replayed)
    assert replayed["error"]["code"] == -32005
    assert len(holds(rt)) == 1 and left(rt) == 75
    assert spend_events(rt) == events  # no reserve/release churn for the replay


# -- restart and expiry ------------------------------------------------------------------


def test_a_restart_keeps_holds(make_runtime: Callable[..., Runtime]) -> None:
    first = make_runtime(policy=SPEND_POLICY)
    define_shop(first)
    c = agent(first)
    ref, req = pay(c, 30)
    hold = req["policy_data"]["spend"]["reservation_id"]
    settings = first.settings
    first.close()
    second = Runtime.start(settings)
    try:
        assert second.spend.reservation(hold).status is HoldStatus.HELD
        assert left(second) == 70
        c.transport = second.acs.handle  # the same agent session, after the restart
        _, result = tool_result(c, ref, "success")
        assert result["policy_data"]["spend"]["outcome"] == "settled"
        assert second.spend.reservation(hold).status is HoldStatus.SETTLED
        assert left(second) == 70
        report = verify_records(second.store.iter_records(), ikm=TEST_IKM)
        # The agent's session, the shop's spend chain and the agent's registration chain.
        assert report.sessions == 3
    finally:
        second.close()


def test_expiry_releases_and_a_late_result_settles_nothing(rt: Runtime) -> None:
    c = agent(rt)
    ref, req = pay(c, 30)
    later = SpendEngine(
        rt.store,
        SpendAuditor(Ledger(rt.store, rt.keys, "warden")),
        clock=lambda: datetime.now(UTC) + timedelta(seconds=61),  # hold_seconds is 60
    )
    assert later.expire_due() == 1
    res = rt.spend.reservation(req["policy_data"]["spend"]["reservation_id"])
    assert (res.status, res.reason) == (HoldStatus.EXPIRED, "expired")
    assert left(rt) == 100
    _, result = tool_result(c, ref, "success")
    assert result["policy_data"]["spend"] == {
        "reservation_id": res.id,
        "budget_id": AGENT,
        "currency": "USD",
        "reserved": "30",
        "outcome": "not_held",
        "status": "expired",
    }
    assert left(rt) == 100


def _wait_for_status(rt: Runtime, status: str, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while True:
        seen = [h["status"] for h in holds(rt)]
        if seen == [status] or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def test_the_background_expirer_releases_holds(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(policy=SPEND_POLICY, spend_expiry_interval_s=0.05)
    define_shop(rt)
    assert rt.expirer is not None
    _, req = tool_call(agent(rt), "flash", {})  # hold_seconds: 1
    assert req["policy_data"]["spend"]["amount"] == "2"
    # Nothing else touches the engine: only the background thread can release it.
    assert _wait_for_status(rt, "expired", 5.0) == ["expired"]


def test_without_the_expirer_a_due_hold_waits_for_the_next_reservation(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(policy=SPEND_POLICY, spend_expiry_interval_s=0)
    define_shop(rt)
    assert rt.expirer is None
    c = agent(rt)
    tool_call(c, "flash", {})
    assert _wait_for_status(rt, "expired", 1.5) == ["held"]
    tool_call(c, "flash", {})  # each reservation first expires what is due
    assert [h["status"] for h in holds(rt)] == ["expired", "held"]


# -- concurrency and the audit trail -----------------------------------------------------


def test_concurrent_priced_calls_never_overspend(rt: Runtime) -> None:
    clients = [agent(rt) for _ in range(24)]
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(c: AcsClient) -> None:
        _, result = pay(c, 10)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decisions = sorted((r["decision"], tuple(r.get("reason_codes", ()))) for r in results)
    assert decisions == [("allow", ())] * 10 + [("deny", ("budget_exceeded",))] * 14
    assert left(rt) == 0
    assert sorted(h["amount"] for h in holds(rt)) == ["10"] * 10


def test_verify_is_clean_after_every_spend_path(rt: Runtime) -> None:
    c = agent(rt)
    ref, _ = pay(c, 10)
    tool_result(c, ref, "success", [{"charged": "8"}])
    ref, _ = pay(c, 10)
    tool_result(c, ref, "failure")
    pay(c, 500)
    tool_call(c, "pay", {"currency": "USD"})
    ref, _ = tool_call(c, "buy", {"quantity": 9})
    tool_result(c, ref, "blocked", tool="buy")
    c.call("steps/sessionEnd", {"reason": "completed"})
    report = verify_records(rt.store.iter_records(), ikm=TEST_IKM)
    # The agent's session, the shop's spend chain and the agent's registration chain.
    assert report.sessions == 3
    assert spend_events(rt).count("reserve") == 3
    assert left(rt) == 92


# -- the shipped AgentDojo bundle ------------------------------------------------------------


def test_agentdojo_transfers_need_a_budget(make_runtime: Callable[..., Runtime]) -> None:
    from conftest import AGENTDOJO_POLICY

    rt = make_runtime(policy=AGENTDOJO_POLICY)
    known = {"recipient": "GB29NWBK60161331926819", "subject": "x", "date": "2022-03-07"}
    # The bundle maps the verified agent id demo-agent (the replay's) to the banking budget.
    banking = agent(rt, "demo-agent")
    _, result = tool_call(banking, "send_money", {**known, "amount": 4.0})
    assert (result["decision"], result["reason_codes"]) == ("deny", ["unknown_budget"])
    # An update that changes no amount moves no new money: not charged.
    _, result = tool_call(banking, "update_scheduled_transaction", {"id": 7, "subject": "rent"})
    assert result["decision"] == "allow" and "spend" not in result.get("policy_data", {})
    for kind, cap, parent in (("org", 10000, None), ("team", 2000, "agentdojo")):
        rt.spend.define_budget(
            Budget(
                "agentdojo" if parent is None else "agentdojo.banking",
                BudgetKind(kind),
                "EUR",
                Decimal(cap),
                Period.MONTH,
                parent_id=parent,
            )
        )
    rt.spend.define_budget(
        Budget(
            "agentdojo.banking.agent",
            BudgetKind.AGENT,
            "EUR",
            Decimal(50),
            Period.NONE,
            parent_id="agentdojo.banking",
        )
    )
    _, result = tool_call(
        banking, "schedule_transaction", {**known, "amount": 50, "recurring": False}
    )
    assert result["policy_data"]["spend"]["budget_id"] == "agentdojo.banking.agent"
    assert result["policy_data"]["spend"]["currency"] == "EUR"
    _, result = tool_call(banking, "update_scheduled_transaction", {"id": 7, "amount": 0.5})
    assert result["policy_data"]["budget"]["available"] == "0"
    # An agent the bundle maps to no budget cannot move money (fail closed).
    stranger = agent(rt, "agentdojo-slack")
    _, result = tool_call(stranger, "send_money", {**known, "amount": 1})
    assert (result["decision"], result["reason_codes"]) == ("deny", ["evaluation_failed"])
