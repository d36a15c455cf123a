"""API keys of role ``agent`` belong to registered agents (issue 15 items 1 and 5), on
both store backends: a key for an unregistered or revoked agent is refused at creation
and stops authenticating when its agent is revoked; on the spend wire an agent spends a
budget the registry lists for it or that names it, and another agent's budget answers
exactly as a missing one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from warden.errors import ConfigError
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.spend import Budget, BudgetKind, Period


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime()
    for bid in ("team-a", "team-b"):
        runtime.spend.define_budget(
            Budget(bid, BudgetKind.ORG, "USD", Decimal(100), Period.NONE)  # bound to nobody
        )
    assert runtime.agents is not None
    runtime.agents.add("bot-a", "alice", budgets=["team-a"])
    runtime.agents.add("bot-b", "bob", groups=["ops"], budgets=["team-b"])
    return runtime


@pytest.fixture
def http(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt)) as c:
        yield c


def test_agent_keys_belong_to_registered_agents(rt: Runtime) -> None:
    with pytest.raises(ConfigError, match="not registered"):
        rt.api_keys.create("nobody", Role.AGENT)
    who, token = rt.api_keys.create("bot-b", Role.AGENT)
    # The key carries the agent's verified facts: owner, registered groups and budgets.
    assert (who.owner, who.groups, who.budgets) == ("bob", ("ops",), ("team-b",))
    assert rt.api_keys.authenticate(token) == who
    assert rt.agents is not None
    rt.agents.revoke("bot-b")
    assert rt.api_keys.authenticate(token) is None
    with pytest.raises(ConfigError, match="revoked"):
        rt.api_keys.create("bot-b", Role.AGENT)


def test_one_agent_cannot_read_or_spend_anothers_budget(rt: Runtime, http: TestClient) -> None:
    tokens = {a: rt.api_keys.create(a, Role.AGENT)[1] for a in ("bot-a", "bot-b")}

    def call(agent: str, method: str, path: str, body: object = None) -> tuple[int, str]:
        r = http.request(
            method,
            path,
            headers={"authorization": f"Bearer {tokens[agent]}"},
            json=body,
        )
        return r.status_code, r.text

    def quote(agent: str, budget: str) -> tuple[int, str]:
        body = {"budgetId": budget, "action": "buy", "amount": "5", "currency": "USD"}
        return call(agent, "POST", "/v1/quotes", body)

    # Each agent reads and spends its own registered budget.
    assert call("bot-a", "GET", "/v1/budgets/team-a")[0] == 200
    ok = quote("bot-a", "team-a")
    assert ok[0] in (200, 201), ok
    # The other's budget answers exactly as a missing one, and nothing is held on it.
    theirs = call("bot-b", "GET", "/v1/budgets/team-a")
    missing = call("bot-b", "GET", "/v1/budgets/team-zz")
    assert theirs[0] == missing[0] == 404
    assert theirs[1] == missing[1].replace("team-zz", "team-a")
    refused, absent = quote("bot-b", "team-a"), quote("bot-b", "team-zz")
    assert refused[0] == absent[0] == 404
    assert refused[1] == absent[1].replace("team-zz", "team-a")
    listed = json.loads(call("bot-b", "GET", "/v1/budgets")[1])
    assert [b["budgetId"] for b in listed["data"]["budgets"]] == ["team-b"]
    with rt.store.engine.connect() as conn:
        from sqlalchemy import text

        held = conn.execute(text("SELECT budget_id FROM reservations")).all()
    assert [r[0] for r in held] == ["team-a"]
