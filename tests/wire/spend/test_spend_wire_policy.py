"""Quotes go through the Guardian first (hooks: [spend/quote]): a deny is the gate
``policy:<rule>`` with no resolution, an ask is ``approval:required`` with a task, a modify
is ``policy:<rule>`` with a retry hint; none holds anything, and each is in the audit
chain of the budget tree."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from conftest import TEST_IKM, asset
from spend_wire_helpers import Api, assert_error, open_api, tree

from warden.ledger.verify import verify_records
from warden.runtime import Runtime


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(policy=asset("spend/quote_policy.yaml"))


@pytest.fixture
def api(rt: Runtime) -> Iterator[Api]:
    yield from open_api(rt)


def _policy_entries(rt: Runtime) -> list[dict[str, object]]:
    return [
        r["entry"]["spend"]
        for r in rt.store.iter_records()
        if r["kind"] == "entry" and r["entry"]["step_type"] == "warden/spend.policy"
    ]


def test_allowed_quote_reserves(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    r = api.quote(bot, "40", action="buy")
    assert r.status == 200 and r.data["quote"]["verdict"] == "ALLOW"
    assert api.budget(bot)["reserved"] == "40"
    assert _policy_entries(rt) == []


def test_denying_rule_is_the_policy_gate_and_holds_nothing(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    r = api.quote(bot, "40.01", action="buy")
    body = assert_error(r, "policy:max_transfer_amount", 403, retryable=False, resolution=None)
    assert "No single spend above 40." in body["message"]
    assert api.budget(bot)["reserved"] == "0"
    (entry,) = _policy_entries(rt)
    assert entry["decision"] == "deny" and entry["rules"] == ["quotes", "max_transfer_amount"]
    verify_records(rt.store.iter_records(), ikm=TEST_IKM)


def test_asking_rule_is_approval_required_with_a_task(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    r = api.quote(bot, "10", action="casino_chips")
    body = assert_error(r, "approval:required", 403, retryable=False, resolution="human_approval")
    task_id = body["resolution"]["taskId"]
    task = api.get(f"/v1/tasks/{task_id}")
    assert task.status == 200
    assert task.data["task"]["status"] == "input_required"
    assert api.budget(bot)["reserved"] == "0"
    assert _policy_entries(rt)[0]["decision"] == "ask"


def test_modifying_rule_asks_for_a_retry_with_the_change(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    r = api.quote(bot, "9", action="tip")
    body = assert_error(r, "policy:round_down", 403, retryable=False, resolution="retry")
    assert '"amount": "5"' in body["resolution"]["hint"]
    assert api.budget(bot)["reserved"] == "0"


def test_no_rule_for_quotes_means_deny(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(policy=asset("conformance/warn.yaml"))
    bot = tree(rt)
    for api in open_api(rt):
        r = api.quote(bot, "1", action="buy")
        assert_error(r, "policy:no_rule_matched", 403, retryable=False, resolution=None)
        assert api.budget(bot)["reserved"] == "0"


def test_two_idempotency_key_headers_are_refused(rt: Runtime, api: Api) -> None:
    bot = tree(rt)
    reply = api.client.post(
        "/v1/quotes",
        json={"budgetId": bot, "action": "buy", "amount": "1", "currency": "USD"},
        headers=[
            ("authorization", f"Bearer {api.token}"),
            ("idempotency-key", "a" * 16),
            ("idempotency-key", "b" * 16),
        ],
    )
    assert reply.status_code == 400
    assert reply.json()["blockedBy"] == "input:invalid_idempotency_key"
    assert api.budget(bot)["reserved"] == "0"
