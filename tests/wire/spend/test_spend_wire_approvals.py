"""The approval desk over REST (``/v1/approvals``) and on the spend wire: API keys with
roles, quotes that need a human, budget increases applied on approval.

Every answer is checked against the seed ``003_…`` envelope (the branch its status
claims) by :func:`check_envelope`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from conftest import ensure_agent
from fastapi.testclient import TestClient
from spend_wire_helpers import Reply, assert_error, check_envelope, db_rows, tree

from warden.approvals.tasks import TASK_WIRES, ApprovalState
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.spend.budgets import Budget, BudgetKind, Period


class Caller:
    """One API key's view of the server (the envelope is checked on every answer)."""

    def __init__(self, client: TestClient, token: str) -> None:
        self.client, self.token = client, token

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Reply:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        r = self.client.request(method, path, json=body, headers=headers, **kw)
        parsed = r.json()
        check_envelope(r.status_code, parsed, mutating=False)
        return Reply(r.status_code, parsed, r.headers)

    def quote(self, budget: str, amount: str) -> Reply:
        body = {"budgetId": budget, "action": "buy", "amount": amount, "currency": "USD"}
        return self.call("POST", "/v1/quotes", body)


def key(rt: Runtime, client: TestClient, principal: str, role: Role, *groups: str) -> Caller:
    ensure_agent(rt, principal, role)
    _, token = rt.api_keys.create(principal, role, groups)
    return Caller(client, token)


@pytest.fixture
def agent(runtime: Runtime, app_client: TestClient) -> Caller:
    return key(runtime, app_client, "bot-1", Role.AGENT)


@pytest.fixture
def fay(runtime: Runtime, app_client: TestClient) -> Caller:
    return key(runtime, app_client, "fay", Role.APPROVER, "finance")


def test_a_large_quote_waits_for_finance_then_reserves_once(
    runtime: Runtime, app_client: TestClient, agent: Caller, fay: Caller
) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    waiting = assert_error(
        agent.quote(bot, "1500"), "approval:required", 403, resolution="human_approval"
    )
    tid = waiting["resolution"]["taskId"]
    # Pending tasks are listed for approvers, with the exact action and the policy.
    listed = fay.call("GET", "/v1/approvals")
    assert listed.status == 200 and listed.data["count"] == 1
    task = listed.data["tasks"][0]
    assert task["id"] == tid and task["wire"] == "spend" and task["kind"] == "spend_approval"
    assert task["action"]["arguments"] == {
        "budgetId": bot,
        "amount": "1500",
        "currency": "USD",
        "action": "buy",
    }
    assert task["policy"]["rules"] == ["spend-quotes", "large-spend-needs-approval"]
    assert task["requester"] == {"agent_id": "bot-1", "principal": "bot-1.owner"}
    # The agent polls its task; another agent cannot see it.
    assert agent.call("GET", f"/v1/tasks/{tid}").data["task"]["state"] == "pending"
    other = key(runtime, app_client, "bot-2", Role.AGENT)
    assert_error(
        other.call("GET", f"/v1/tasks/{tid}"), "input:unknown_task", 404, resolution="retry"
    )
    # A different amount is another action: it asks again.
    assert_error(agent.quote(bot, "1501"), "approval:required", 403, resolution="human_approval")
    approved = fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "budgeted"})
    assert approved.status == 200 and approved.data["task"]["state"] == "approved"
    assert agent.call("GET", f"/v1/tasks/{tid}").data["task"]["status"] == "completed"
    ok = agent.quote(bot, "1500")
    assert ok.status == 200, ok.body
    rid = ok.data["quote"]["reservation"]["reservationId"]
    (record,) = db_rows(runtime, f"SELECT record FROM reservations WHERE reservation_id = '{rid}'")
    assert f'"approval_task":"{tid}"' in record[0]
    assert runtime.desk.get(tid).state is ApprovalState.CONSUMED  # type: ignore[union-attr]
    # Single use.
    assert_error(agent.quote(bot, "1500"), "approval:required", 403, resolution="human_approval")


def test_a_denied_quote_is_refused_with_the_reason(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    tid = agent.quote(bot, "2000").body["resolution"]["taskId"]
    assert_error(
        fay.call("POST", f"/v1/approvals/{tid}/deny", {}), "input:invalid", 400, resolution="retry"
    )
    # A reason of only whitespace is no reason (fresh-user review, issue 18).
    assert_error(
        fay.call("POST", f"/v1/approvals/{tid}/deny", {"reason": "  \t "}),
        "input:invalid",
        400,
        resolution="retry",
    )
    denied = fay.call("POST", f"/v1/approvals/{tid}/deny", {"reason": "not this quarter"})
    assert denied.data["task"]["state"] == "denied"
    refused = assert_error(agent.quote(bot, "2000"), "approval:denied", 403, resolution="retry")
    assert "not this quarter" in refused["message"]


def test_a_budget_increase_is_applied_when_approved(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    bot = tree(runtime)
    body = {"budgetId": bot, "cap": "55", "reason": "launch week"}
    tid = agent.call("POST", "/v1/budget-requests", body).body["resolution"]["taskId"]
    assert agent.call("GET", f"/v1/budgets/{bot}").data["budget"]["cap"] == "50"
    done = fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"})
    assert done.data["task"]["state"] == "consumed"
    assert done.data["task"]["consumed_by"]["applied"] == {
        "budgetId": bot,
        "previousCap": "50",
        "cap": "55",
    }
    assert agent.call("GET", f"/v1/budgets/{bot}").data["budget"]["cap"] == "55"


def test_roles_and_maker_checker_over_rest(
    runtime: Runtime, app_client: TestClient, agent: Caller, fay: Caller
) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000", principals=("bot-1", "boss"))
    ops = key(runtime, app_client, "olga", Role.APPROVER, "operators")
    tid = agent.quote(bot, "1200").body["resolution"]["taskId"]
    nobody = Caller(app_client, "")
    assert_error(
        nobody.call("GET", "/v1/approvals"), "auth:required", 401, resolution="authenticate"
    )
    assert_error(
        agent.call("GET", "/v1/approvals"), "auth:forbidden", 403, resolution="authenticate"
    )
    assert_error(
        agent.call("POST", f"/v1/approvals/{tid}/approve", {}),
        "auth:forbidden",
        403,
        resolution="authenticate",
    )
    assert_error(fay.quote(bot, "1"), "auth:forbidden", 403, resolution="authenticate")
    assert_error(
        ops.call("POST", f"/v1/approvals/{tid}/approve", {}), "approval:not_permitted", 403
    )
    # An admin who is also the requester cannot approve its own quote.
    boss_token = runtime.api_keys.create("boss", Role.ADMIN)[1]
    boss = Caller(app_client, boss_token)
    own = boss.quote(bot, "1300").body["resolution"]["taskId"]
    assert_error(
        boss.call("POST", f"/v1/approvals/{own}/approve", {}), "approval:not_permitted", 403
    )
    assert_error(fay.call("GET", "/v1/approvals/task_nope"), "approval:task_not_found", 404)
    fay.call("POST", f"/v1/approvals/{tid}/approve", {})
    assert_error(
        fay.call("POST", f"/v1/approvals/{tid}/approve", {}),
        "approval:task_conflict",
        409,
        resolution="retry",
    )
    rerouted = ops.call("GET", "/v1/approvals?state=all&group=finance")
    assert {t["id"] for t in rerouted.data["tasks"]} == {tid, own}


def test_reroute_and_filters(runtime: Runtime, agent: Caller, fay: Caller) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    tid = agent.quote(bot, "1100").body["resolution"]["taskId"]
    moved = fay.call("POST", f"/v1/approvals/{tid}/reroute", {"group": "cfo", "reason": "big"})
    assert moved.data["task"]["approver_group"] == "cfo"
    assert moved.data["task"]["history"][-1]["event"] == "rerouted"
    assert fay.call("GET", "/v1/approvals?group=finance").data["count"] == 0
    assert fay.call("GET", "/v1/approvals?group=cfo").data["count"] == 1
    assert_error(
        fay.call("GET", "/v1/approvals?state=bogus"), "input:invalid", 400, resolution="retry"
    )


def test_an_unknown_or_empty_filter_is_refused_naming_the_valid_ones(fay: Caller) -> None:
    """The wires a task can come from are a closed set: an unknown one is a 400 naming
    them all, as an unknown state is, not an empty list (decision 1156)."""
    assert fay.call("GET", "/v1/approvals?wire=spend&state=all").status == 200
    for query in ("wire=bogus", "wire=", "state="):
        body = assert_error(
            fay.call("GET", f"/v1/approvals?{query}"), "input:invalid", 400, resolution="retry"
        )
        name = query.split("=")[0]
        valid = TASK_WIRES if name == "wire" else [s.value for s in ApprovalState]
        assert all(f"'{v}'" in body["message"] for v in valid), body


def test_the_approval_routes_are_in_the_openapi_document(app_client: TestClient) -> None:
    paths = app_client.get("/openapi.json").json()["paths"]
    assert {"get"} <= set(paths["/v1/approvals"])
    assert {"get"} <= set(paths["/v1/approvals/{task_id}"])
    for verb in ("approve", "deny", "reroute"):
        assert "post" in paths[f"/v1/approvals/{{task_id}}/{verb}"]


def test_the_bootstrap_token_is_an_admin_key(runtime: Runtime, app_client: TestClient) -> None:
    admin = Caller(app_client, runtime.api_token)
    assert admin.call("GET", "/v1/approvals").status == 200
    (row,) = db_rows(runtime, "SELECT principal, role, secret_hash FROM api_keys")
    assert row[:2] == ("admin", "admin") and runtime.api_token not in row[2]


def test_the_grant_is_bound_to_the_amount_not_its_spelling(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    tid = agent.quote(bot, "1500").body["resolution"]["taskId"]
    assert_error(agent.quote(bot, "1500.0"), "approval:required", 403, resolution="human_approval")
    assert len(runtime.desk.list()) == 1  # the same quote, the same task
    fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"})
    assert agent.quote(bot, "1500.00").status == 200


def test_unknown_routes_are_404_for_every_role(agent: Caller, fay: Caller) -> None:
    for who in (agent, fay):
        assert_error(who.call("GET", "/v1/nothing"), "input:unknown_route", 404, resolution="retry")
    # Not the admin role's business either: a wrong method is an unknown route.
    assert_error(
        fay.call("GET", "/v1/approvals/x/approve"), "input:unknown_route", 404, resolution="retry"
    )


def test_approval_bodies_are_parsed_strictly(
    runtime: Runtime, app_client: TestClient, agent: Caller, fay: Caller
) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    tid = agent.quote(bot, "1500").body["resolution"]["taskId"]
    r = app_client.post(
        f"/v1/approvals/{tid}/deny",
        content=b'{"reason":"a","reason":"b"}',
        headers={"Authorization": f"Bearer {fay.token}", "content-type": "application/json"},
    )
    assert r.status_code == 400, r.text
    check_envelope(r.status_code, r.json(), mutating=False)
    assert runtime.desk.get(tid).state is ApprovalState.PENDING  # type: ignore[union-attr]


def test_a_long_list_says_it_is_truncated(runtime: Runtime, agent: Caller, fay: Caller) -> None:
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    for amount in ("1001", "1002", "1003"):
        agent.quote(bot, amount)
    page = fay.call("GET", "/v1/approvals?limit=2").data
    assert (page["count"], page["truncated"]) == (2, True)
    assert fay.call("GET", "/v1/approvals?limit=3").data["truncated"] is False


def test_reroute_to_a_group_without_approvers_is_accepted_with_a_warning(
    make_backend_runtime: Any,
) -> None:
    # Reads the key table on each backend (fresh-user review of issue 14).
    rt: Runtime = make_backend_runtime()
    with TestClient(create_app(rt)) as client:
        bot = tree(rt, org="5000", team="5000", agent="5000")
        agent = key(rt, client, "bot-1", Role.AGENT)
        fay = key(rt, client, "fay", Role.APPROVER, "finance")
        key(rt, client, "olga", Role.APPROVER, "ops")
        waiting = assert_error(
            agent.quote(bot, "1500"), "approval:required", 403, resolution="human_approval"
        )
        tid = waiting["resolution"]["taskId"]
        path = f"/v1/approvals/{tid}/reroute"
        moved = fay.call("POST", path, {"group": "nonexistent-group"})
        assert moved.status == 200, moved.body
        assert moved.data["task"]["approver_group"] == "nonexistent-group"
        warning = moved.data["warning"]
        assert "no active approver key is in group 'nonexistent-group'" in warning
        assert warning in moved.body["nextActions"]
        # A group with an active approver: no warning member at all.
        back = Caller(client, rt.api_token).call("POST", path, {"group": "ops"})
        assert back.status == 200 and "warning" not in back.data, back.body
        assert back.data["task"]["approver_group"] == "ops"


def test_a_quote_that_cannot_fit_is_refused_before_it_asks_a_human(
    runtime: Runtime, app_client: TestClient
) -> None:
    """Fresh-user review M3 (decision 920): a quote the policy asks about but that a budget
    on its path has no room for is the budget's 402 at once, and files no task (one key
    could otherwise flood the desk with quotes no approval could make succeed)."""
    bot = tree(runtime)  # agent cap 50
    agent = key(runtime, app_client, "bot-1", Role.AGENT)
    for amount in ("1500", "5001", "5002", "999999999999"):
        body = assert_error(agent.quote(bot, amount), "budget:exceeded", 402, resolution="retry")
        assert (body["limit"], body["requested"]) == (50, int(amount)), body
    assert runtime.desk.list() == []


def test_a_grant_is_not_burnt_by_a_quote_the_budget_refuses(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    """M3 (decision 921): a granted quote that no longer fits is refused with the budget's
    402 and its grant stays approved (not "consumed ... on resubmission"); once there is
    room, the same quote consumes it and reserves once."""
    bot = tree(runtime, org="5000", team="5000", agent="2000")
    tid = agent.quote(bot, "1500").body["resolution"]["taskId"]
    fay.call("POST", f"/v1/approvals/{tid}/approve", {"reason": "ok"})
    small = agent.quote(bot, "1000")  # the policy allows it: 1000 of 2000 left
    assert small.status == 200, small.body
    for _ in range(2):
        assert_error(
            agent.quote(bot, "1500"), "budget:exceeded", 402, retryable=True, resolution="retry"
        )
    task = runtime.desk.get(tid)
    assert task is not None and task.state is ApprovalState.APPROVED
    assert task.consumed_by is None
    assert not any(h.get("event") == "consumed" for h in task.history)
    assert len(runtime.desk.list()) == 1  # no new task either
    rid = small.data["quote"]["reservation"]["reservationId"]
    assert agent.call("POST", f"/v1/reservations/{rid}/release", {}).status == 200
    ok = agent.quote(bot, "1500")
    assert ok.status == 200, ok.body
    assert runtime.desk.get(tid).state is ApprovalState.CONSUMED  # type: ignore[union-attr]


def test_a_budget_request_needs_a_reason_and_is_filed_once(
    runtime: Runtime, agent: Caller, fay: Caller
) -> None:
    """Review L5 (decisions 926, 927): a reason of only whitespace is refused, as on a
    deny; the same request sent twice answers with the one pending task."""
    bot = tree(runtime)
    blank = {"budgetId": bot, "cap": "55", "reason": " \t\n "}
    body = assert_error(
        agent.call("POST", "/v1/budget-requests", blank), "input:invalid", 400, resolution="retry"
    )
    assert "reason" in body["message"] and "whitespace" in body["message"], body
    assert runtime.desk.list() == []
    ask = {"budgetId": bot, "cap": "55", "reason": "launch week"}
    first = agent.call("POST", "/v1/budget-requests", ask).body["resolution"]["taskId"]
    again = agent.call("POST", "/v1/budget-requests", ask)
    assert_error(again, "approval:required", 403, resolution="human_approval")
    assert again.body["resolution"]["taskId"] == first
    assert [t.id for t in runtime.desk.list()] == [first]
    # Another reason (or cap) is another request; a decided one is not reused.
    other = agent.call("POST", "/v1/budget-requests", {**ask, "reason": "a second launch"})
    assert other.body["resolution"]["taskId"] != first
    fay.call("POST", f"/v1/approvals/{first}/deny", {"reason": "no"})
    anew = agent.call("POST", "/v1/budget-requests", ask).body["resolution"]["taskId"]
    assert anew not in (first, other.body["resolution"]["taskId"])


@pytest.mark.parametrize("reason", ["\u200b", "\u0000", " \u200b\u2060\ufeff\u0007 "])
def test_a_budget_request_reason_needs_a_visible_character(
    runtime: Runtime, app_client: TestClient, reason: str
) -> None:
    """Second review (decision 942): invisible characters say nothing either."""
    bot = tree(runtime)
    agent = key(runtime, app_client, "bot-1", Role.AGENT)
    body = assert_error(
        agent.call("POST", "/v1/budget-requests", {"budgetId": bot, "cap": "55", "reason": reason}),
        "input:invalid",
        400,
        resolution="retry",
    )
    assert "reason" in body["message"] and "visible" in body["message"], body
    assert runtime.desk.list() == []
    # One visible character (any script, a symbol) is a reason.
    for said in ("\u200b€", "理由"):
        ok = agent.call(
            "POST", "/v1/budget-requests", {"budgetId": bot, "cap": "55", "reason": said}
        )
        assert_error(ok, "approval:required", 403, resolution="human_approval")


def test_the_same_cap_however_written_is_one_budget_request(
    runtime: Runtime, app_client: TestClient
) -> None:
    """Second review (decision 943): "3000", 3000 and "3000.00" are the same cap."""
    bot = tree(runtime, org="5000", team="5000")
    agent = key(runtime, app_client, "bot-1", Role.AGENT)
    tasks = {
        agent.call(
            "POST", "/v1/budget-requests", {"budgetId": bot, "cap": cap, "reason": "launch"}
        ).body["resolution"]["taskId"]
        for cap in ("3000", 3000, "3000.00", "03000.0")
    }
    assert len(tasks) == 1 and [t.id for t in runtime.desk.list()] == list(tasks)
    other = agent.call(
        "POST", "/v1/budget-requests", {"budgetId": bot, "cap": "3000.01", "reason": "launch"}
    )
    assert other.body["resolution"]["taskId"] not in tasks


def test_a_budget_under_an_adcp_budget_cannot_be_raised(
    runtime: Runtime, app_client: TestClient
) -> None:
    """Second review (decision 940): raising a budget under an AdCP plan's budget would
    spend the plan's money around check_governance, as a quote or PUT would."""
    team = tree(runtime, prefix="adcp:zzz").rsplit(".", 1)[0]
    runtime.spend.define_budget(
        Budget(
            "plain.kid",
            BudgetKind.AGENT,
            "USD",
            Decimal("20"),
            Period.NONE,
            team,
            principals=("bot-1",),
        )
    )
    agent = key(runtime, app_client, "bot-1", Role.AGENT)
    for bid in ("plain.kid", team):
        body = assert_error(
            agent.call(
                "POST", "/v1/budget-requests", {"budgetId": bid, "cap": "30", "reason": "more"}
            ),
            "budget:other_wire",
            409,
        )
        assert "under it" in body["message"], body
    assert runtime.desk.list() == []


@pytest.mark.parametrize(
    "reason",
    [
        "\u200b",
        "\u0000",
        " \u200b\u2060\ufeff\u0007 ",
        "\u3164",
        "\u115f\u1160",
        "\uffa0",
        "\u2800",
    ],
)
def test_a_deny_reason_needs_a_visible_character(
    runtime: Runtime, reason: str, agent: Caller, fay: Caller
) -> None:
    """Decision 973: a deny's reason follows the budget request's rule (one helper,
    warden.reasons): invisible characters are refused and change nothing."""
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    tid = agent.quote(bot, "2000").body["resolution"]["taskId"]
    body = assert_error(
        fay.call("POST", f"/v1/approvals/{tid}/deny", {"reason": reason}),
        "input:invalid",
        400,
        resolution="retry",
    )
    assert "a reason needs a visible character" in body["message"], body
    assert runtime.desk.get(tid).state.value == "pending"  # type: ignore[union-attr]
    denied = fay.call("POST", f"/v1/approvals/{tid}/deny", {"reason": "\u200b€"})
    assert denied.data["task"]["state"] == "denied"


@pytest.mark.parametrize("reason", ["\u200b", "\u3164", " \u2800 "])
def test_an_optional_reason_given_must_say_something(
    runtime: Runtime, reason: str, agent: Caller, fay: Caller
) -> None:
    """Decision 298: approve and reroute may leave the reason out, but a reason given
    that says nothing is refused (400) and nothing changes; left out, they proceed."""
    bot = tree(runtime, org="5000", team="5000", agent="5000")
    tid = agent.quote(bot, "2000").body["resolution"]["taskId"]
    for route, body in (
        ("approve", {"reason": reason}),
        ("reroute", {"group": "ops", "reason": reason}),
    ):
        refused = assert_error(
            fay.call("POST", f"/v1/approvals/{tid}/{route}", body),
            "input:invalid",
            400,
            resolution="retry",
        )
        assert "a reason, when given, must say something" in refused["message"], refused
        task = runtime.desk.get(tid)
        assert task is not None and task.state.value == "pending" and task.votes == ()
    approved = fay.call("POST", f"/v1/approvals/{tid}/approve", {})
    assert approved.data["task"]["state"] == "approved"
