"""Fixes from the fresh-user review of the AdCP governance agent (notes/review-adcp.md):
the test controller off by default; never approving more than is held nor issuing a
token Warden's own verifier rejects; execution checks bound to the token's seller;
per-action audit figures; sync_plans validation; adjustments' maker-checker; REST/MCP
parity. Each test here failed before its fix."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from adcp_helpers import Live, intent, live, mcp_session, plan, run
from storyboard import SELLER_URL, Seller, run_storyboard

from warden.adcp.token_verifier import (
    GovernanceTokenVerifier,
    InMemoryJtiReplayStore,
    StaticJwks,
)
from warden.runtime import Runtime
from warden.settings import Settings

SCENARIOS = "protocols/media-buy/scenarios/"


@pytest.fixture
def srv(make_runtime: Callable[..., Runtime]) -> Iterator[Live]:
    with live(make_runtime()) as s:
        yield s


def sync(s: Live, *plans: dict[str, Any], token: str | None = "agent") -> Any:
    return s.rest(token).call(
        "sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": list(plans)}
    )


def claims_of(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    out: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return out


# -- 1. comply_test_controller is off unless the operator turns it on ------------------


def test_test_controller_is_off_by_default(srv: Live) -> None:
    assert sync(srv, plan("real", 50000)).body["plans"][0]["version"] == 1
    seeded = srv.rest().call(
        "comply_test_controller",
        {
            "account": {"sandbox": True},
            "scenario": "seed_plan",
            "params": {
                "plan_id": "real",
                "fixture": {k: v for k, v in plan("real", 99999999).items() if k != "plan_id"},
            },
        },
    )
    assert seeded.code == "UNSUPPORTED_FEATURE"
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["real"]})
    assert logs.body["plans"][0]["budget"]["authorized"] == 50000  # unchanged

    async def tools() -> set[str]:
        async with mcp_session(srv.url, srv.agent_token) as session:
            return {t.name for t in (await session.list_tools()).tools}

    assert "comply_test_controller" not in run(tools())


def test_test_controller_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().adcp_test_controller is False
    monkeypatch.setenv("WARDEN_ADCP_TEST_CONTROLLER", "true")
    assert Settings().adcp_test_controller is True


# -- 2. never approve more than is held; never a token our own verifier rejects -------


def test_payload_above_the_commitment_is_denied(srv: Live) -> None:
    sync(srv, plan("p-sell", 50000))
    body = intent("p-sell", 10)
    body["payload"]["total_budget"] = {"amount": 1_000_000_000, "currency": "USD"}
    r = srv.rest().call("check_governance", body)
    assert r.body["verdict"] == "denied", r.body
    finding = r.body["findings"][0]
    assert finding["category_id"] == "budget_authority"
    assert "more than the proposed commitment" in finding["explanation"]
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["p-sell"]})
    assert logs.body["plans"][0]["budget"]["committed"] == 0  # nothing held


def test_a_check_without_any_amount_is_denied(srv: Live) -> None:
    sync(srv, plan("p-none", 50000))
    body = intent("p-none", 0)
    del body["proposed_commitment"]
    body["payload"] = {"ext": {"governance_policy_acknowledgements": ["x"]}}
    r = srv.rest().call("check_governance", body)
    assert r.body["verdict"] == "denied", r.body
    assert "governance_context" not in r.body
    assert "proposed_commitment" in r.body["findings"][0]["explanation"]


def _verify_all_tokens(s: Live, principal: str, plan_ids: list[str]) -> int:
    """Verify every token stored for the plans with Warden's own seller-side verifier,
    as the seller each token names (its aud), for the action its check stated."""
    assert s.rt.adcp is not None
    jwks = s.http.get("/.well-known/jwks.json").json()
    issuer = s.rt.adcp.state.signer.issuer
    seen = 0
    with s.rt.store.transaction() as tx:
        rows = s.rt.adcp.state.rows(tx)
        for plan_id in plan_ids:
            checks = rows.checks(principal, plan_id)
            by_id = {c.check_id: c for c in checks}
            for c in checks:
                token = (c.record.get("response") or {}).get("governance_context")
                if not token:
                    continue
                claims = claims_of(token)
                intent_row = by_id.get(str(c.record.get("intent_check_id")), c)
                payload = intent_row.record["request"].get("payload") or {}
                verifier = GovernanceTokenVerifier(
                    audience=claims["aud"],
                    jwks=StaticJwks({issuer: jwks}),
                    replay_store=InMemoryJtiReplayStore(),
                    clock=lambda iat=claims["iat"]: float(iat),
                )
                verifier.verify(
                    token,
                    caller=claims["caller"],
                    task=str(intent_row.record["tool"]),
                    payload=payload,
                    commitment={"amount": float(c.record["amount"]), "currency": "USD"},
                    buyer_issuers=[issuer],
                    phase=claims["phase"],
                    media_buy_id=claims.get("media_buy_id"),
                )
                seen += 1
    return seen


def test_every_storyboard_token_verifies_with_wardens_own_verifier(srv: Live) -> None:
    jwks = srv.http.get("/.well-known/jwks.json").json()
    assert srv.rt.adcp is not None
    seller = Seller(
        srv.rest(srv.key("buyer-agent", "agent")), jwks, srv.rt.adcp.state.signer.issuer
    )
    plans = []
    for name, plan_id in (
        ("governance_approved.yaml", "comply-gov-approved-plan"),
        ("governance_conditions.yaml", "comply-gov-conditions-plan"),
        ("governance_denied_recovery.yaml", "comply-gov-recovery-plan"),
    ):
        run_storyboard(SCENARIOS + name, srv.rest(), seller)
        plans.append(plan_id)
    run_storyboard(
        "specialisms/governance-delivery-monitor/index.yaml",
        srv.rest(),
        None,
        skip=frozenset({"create_media_buy", "get_media_buy_delivery"}),
        context={"media_buy_id": "mb_acme_q2_2026"},
        reviewer=srv.rest(srv.key("buyer-agent", "agent")),
    )
    plans.append("gov_acme_delivery_monitor")
    assert _verify_all_tokens(srv, "buyer-agent", plans) >= 8


# -- 3. execution checks bind the seller the token names ------------------------------


def test_execution_check_from_another_caller_is_unknown(srv: Live) -> None:
    sync(srv, plan("p-x", 50000, approved_sellers=["https://seller.example.com"]))
    token = srv.rest().call("check_governance", intent("p-x", 400)).body["governance_context"]
    stranger = srv.rest(srv.key("seller-x", "agent"))
    evil = stranger.call(
        "check_governance",
        {
            "caller": "https://evil.example",
            "governance_context": token,
            "planned_delivery": {"total_budget": 300, "currency": "USD"},
        },
    )
    missing = stranger.call(
        "check_governance",
        {
            "caller": "https://evil.example",
            "governance_context": token[:-4] + "AAAA",
            "planned_delivery": {"total_budget": 300, "currency": "USD"},
        },
    )
    assert evil.failed and evil.code == "REFERENCE_NOT_FOUND", evil.body
    assert missing.failed
    # The seller the token names may check; a denial shows it no buyer figures.
    over = stranger.call(
        "check_governance",
        {
            "caller": SELLER_URL,
            "governance_context": token,
            "planned_delivery": {"total_budget": 500, "currency": "USD"},
        },
    )
    assert over.body["verdict"] == "denied", over.body
    text = json.dumps(over.body)
    # No buyer figure as a number or amount; random ids and timestamps ("…:00.400Z",
    # "…-4003-…") may hold the same digits, so only a free-standing figure counts.
    for figure in ("50000", "400"):
        assert not re.search(rf"(?<![0-9A-Za-z_.:-]){figure}(?![0-9A-Za-z_])", text), text
    assert "details" not in text
    ok = stranger.call(
        "check_governance",
        {
            "caller": SELLER_URL,
            "governance_context": token,
            "planned_delivery": {"total_budget": 300, "currency": "USD"},
        },
    )
    assert ok.body["verdict"] == "approved", ok.body
    assert claims_of(ok.body["governance_context"])["caller"] == SELLER_URL


# -- 4. per-action audit figures -------------------------------------------------------


def settle(s: Live, plan_id: str, amount: float, committed: float) -> tuple[str, str]:
    """An approved check of ``amount`` and its completed outcome of ``committed``:
    (the outcome_id, the intent's governance_context)."""
    check = s.rest().call("check_governance", intent(plan_id, amount)).body
    assert check["verdict"] == "approved", check
    out = s.rest().call(
        "report_plan_outcome",
        {
            "idempotency_key": str(uuid.uuid4()),
            "plan_id": plan_id,
            "check_id": check["check_id"],
            "governance_context": check["governance_context"],
            "outcome": "completed",
            "seller_response": {"seller_reference": "mb-1", "committed_budget": committed},
        },
    )
    assert not out.failed, out.body
    return str(out.body["outcome_id"]), str(check["governance_context"])


DECOMMIT = {
    "seller_reference": "mb-1",
    "seller_adjustment_id": "cancel-1",
    "adjustment_type": "decommitment",
    "amount": {"amount": 1000, "currency": "USD"},
    "reason": "Remaining inventory cancelled by agreement.",
    "effective_at": "2099-05-20T09:30:00Z",
    "evidence": {
        "evidence_id": "agreement-1",
        "evidence_type": "decommitment_agreement",
        "digest": "sha256:" + "a" * 64,
        "issued_at": "2099-05-20T09:25:00Z",
    },
}


def adjust(s: Live, token: str | None, body: dict[str, Any]) -> Any:
    return s.rest(token).call(
        "report_plan_adjustment", {"idempotency_key": str(uuid.uuid4()), **body}
    )


def test_per_action_figures_follow_outcome_and_adjustments(srv: Live) -> None:
    sync(srv, plan("p-act", 50000))
    outcome_id, _ = settle(srv, "p-act", 25000, 24000)
    reported = adjust(
        srv,
        "agent",
        {
            "action": "report",
            "plan_id": "p-act",
            "outcome_id": outcome_id,
            **DECOMMIT,
        },
    )
    assert not reported.failed, reported.body
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["p-act"]}).body["plans"][0]
    action = logs["governed_actions"][0]
    assert logs["budget"]["committed"] == 24000
    assert action["committed"] == 24000 and action["status"] == "completed"
    assert action["adjustments_reported"] == 1000 and action["adjustments_verified"] == 0
    assert action["seller_reference"] == "mb-1"


# -- 5. sync_plans validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            {"budget": {**plan()["budget"], "currency": "dollars"}},
            "plans[0].budget.currency",
            "ISO 4217",
        ),
        (
            {"flight": {"start": "2026-12-31T00:00:00Z", "end": "2026-01-01T00:00:00Z"}},
            "plans[0].flight.end",
            "after flight.start",
        ),
        ({"plan_id": ""}, "plans[0].plan_id", "1 to 255"),
        ({"plan_id": "x" * 100_000}, "plans[0].plan_id", "1 to 255"),
        ({"plan_id": "a b"}, "plans[0].plan_id", "letters, digits"),
    ],
)
def test_sync_plans_refuses_nonsense(
    srv: Live, change: dict[str, Any], field: str, words: str
) -> None:
    item = {**plan("ok"), **change}
    r = sync(srv, item)
    assert r.code == "INVALID_REQUEST", r.body
    assert r.body["adcp_error"]["field"] == field and words in r.body["adcp_error"]["message"]
    assert len(r.body["adcp_error"]["message"]) < 300


def test_sync_plans_limits_and_duplicates(srv: Live) -> None:
    many = sync(srv, *[plan(f"p{i}") for i in range(101)])
    assert many.code == "INVALID_REQUEST" and "at most 100" in many.body["adcp_error"]["message"]
    dup = sync(srv, plan("dup"), plan("dup", 5))
    assert dup.code == "INVALID_REQUEST"
    assert "more than once" in dup.body["adcp_error"]["message"]
    assert srv.rest().call("get_plan_audit_logs", {"plan_ids": ["dup"]}).body["plans"] == []


def test_each_plan_counts_against_the_rate_limit(srv: Live) -> None:
    assert srv.rt.adcp is not None
    limiter = srv.rt.adcp.rate_limiter
    limiter.limits["write"] = (0.001, 150.0)
    assert not sync(srv, *[plan(f"a{i}") for i in range(100)]).failed
    second = sync(srv, *[plan(f"b{i}") for i in range(100)])
    assert second.code == "RATE_LIMITED", second.body


def test_resync_cannot_go_below_what_is_committed(srv: Live) -> None:
    sync(srv, plan("p-low", 50000))
    settle(srv, "p-low", 25000, 24000)
    r = sync(srv, plan("p-low", 1000))
    assert (
        r.code == "INVALID_REQUEST" and "already commits 24000" in r.body["adcp_error"]["message"]
    )
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["p-low"]}).body["plans"][0]
    assert logs["budget"]["authorized"] == 50000 and logs["budget"]["remaining"] == 26000
    assert not sync(srv, plan("p-low", 24000)).failed


# -- 6. adjustments: the reporting key may not accept what restores headroom -----------


def test_adjustment_maker_checker_and_reference(srv: Live) -> None:
    sync(srv, plan("p-adj", 50000))
    outcome_id, _ = settle(srv, "p-adj", 25000, 24000)
    base = {"action": "report", "plan_id": "p-adj", "outcome_id": outcome_id}
    wrong = adjust(srv, "agent", {**base, **DECOMMIT, "seller_reference": "mb-other"})
    assert wrong.code == "REFERENCE_NOT_FOUND", wrong.body
    reported = adjust(srv, "agent", {**base, **DECOMMIT}).body
    review = {"action": "review", "plan_id": "p-adj", "adjustment_id": reported["adjustment_id"]}
    own = adjust(srv, "agent", {**review, "decision": "accept"})
    assert own.code == "PERMISSION_DENIED", own.body
    buyer = srv.key("buyer-agent", "agent")
    accepted = adjust(srv, buyer, {**review, "decision": "accept"})
    assert accepted.body["adjustment_state"] == "verified", accepted.body
    assert accepted.body["headroom_restored"] == 1000
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["p-adj"]}).body["plans"][0]
    action = logs["governed_actions"][0]
    assert action["adjustments_verified"] == 1000 and action["net_cost"] == 23000
    assert action["headroom_restored"] == 1000 and action["net_committed"] == 23000
    assert logs["budget"]["net_cost"] == 23000


# -- 8. REST and MCP treat bad input alike ----------------------------------------------

MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def mcp_post(s: Live, raw: bytes | str) -> httpx.Response:
    data = raw.encode() if isinstance(raw, str) else raw
    headers = {**MCP_HEADERS, "authorization": f"Bearer {s.agent_token}"}
    return s.http.post("/mcp", content=data, headers=headers)


def tool_call(name: str, arguments_json: str, rpc_id: int = 7) -> str:
    params = f'{{"name":"{name}","arguments":{arguments_json}}}'
    return f'{{"jsonrpc":"2.0","id":{rpc_id},"method":"tools/call","params":{params}}}'


def adcp_failure(r: httpx.Response) -> dict[str, Any]:
    """The AdCP failure in an MCP answer: a JSON-RPC result with isError, or the body."""
    body = r.json()
    if "jsonrpc" in body:
        assert r.status_code == 200 and body["result"]["isError"] is True, body
        out: dict[str, Any] = body["result"]["structuredContent"]
        return out
    return dict(body)


def test_mcp_refuses_what_rest_refuses(srv: Live) -> None:
    dup = adcp_failure(
        mcp_post(srv, tool_call("get_plan_audit_logs", '{"plan_ids":["a"],"plan_ids":["b"]}'))
    )
    assert dup["adcp_error"]["code"] == "INVALID_REQUEST"
    assert "duplicate object key" in dup["adcp_error"]["message"]
    nan = adcp_failure(
        mcp_post(srv, tool_call("check_governance", json.dumps(intent("p", 1))[:-1] + ',"x":NaN}'))
    )
    assert nan["adcp_error"]["code"] == "INVALID_REQUEST" and "NaN" in nan["adcp_error"]["message"]
    listed = adcp_failure(mcp_post(srv, tool_call("get_plan_audit_logs", "[1,2]")))
    assert "must be one JSON object" in listed["adcp_error"]["message"]
    big = mcp_post(srv, tool_call("get_plan_audit_logs", '{"plan_ids":["%s"]}' % ("x" * 1_100_000)))
    assert big.status_code == 413 and big.json()["adcp_error"]["code"] == "INVALID_REQUEST"
    get = srv.http.get(
        "/adcp/check_governance", headers={"authorization": f"Bearer {srv.agent_token}"}
    )
    assert get.status_code == 405 and get.json()["adcp_error"]["code"] == "UNSUPPORTED_FEATURE"


@pytest.mark.parametrize(
    ("raw_number", "words"),
    [("1e400", "infinite or too large"), ("1e308", "too large"), ("1e20", "too large")],
)
def test_numbers_are_reported_as_what_they_are(srv: Live, raw_number: str, words: str) -> None:
    body = json.dumps(intent("p", 1)).replace('"amount": 1,', f'"amount": {raw_number},', 1)
    r = srv.rest().call("check_governance", raw=body.encode())
    err = r.body["adcp_error"]
    assert err["code"] == "INVALID_REQUEST" and words in err["message"], err
    assert err["field"] == "proposed_commitment.amount" and len(err["message"]) < 200


def test_mcp_tools_carry_their_request_schema(srv: Live) -> None:
    from jsonschema import Draft7Validator

    async def tools() -> dict[str, Any]:
        async with mcp_session(srv.url, srv.agent_token) as session:
            return {t.name: t.input_schema for t in (await session.list_tools()).tools}

    schemas = run(tools())
    v = Draft7Validator(schemas["check_governance"])
    Draft7Validator.check_schema(schemas["check_governance"])
    assert v.is_valid(intent("p", 10))
    assert not v.is_valid({**intent("p", 10), "caller": 5})
    assert not Draft7Validator(schemas["sync_plans"]).is_valid({"plans": []})


# -- 9. the small ones -----------------------------------------------------------------


def test_context_id_echoed_and_context_checked(srv: Live) -> None:
    r = srv.rest(None).call("get_adcp_capabilities", {"context_id": "mine-1"})
    assert r.code == "AUTH_MISSING" and r.body["context_id"] == "mine-1"
    bad = srv.rest().call("get_adcp_capabilities", {"context": "str"})
    assert bad.code == "INVALID_REQUEST" and bad.body["adcp_error"]["field"] == "context"
    empty = srv.rest().call("get_plan_audit_logs", {})
    assert "plan_ids, portfolio_plan_ids or governance_contexts" in empty.body["message"]

    async def mcp_auth() -> Any:
        http = httpx.AsyncClient(timeout=30)
        async with http:
            return await http.post(
                srv.url + "/mcp",
                content=tool_call("get_adcp_capabilities", '{"context_id":"mine-2"}'),
                headers=MCP_HEADERS,
            )

    r2 = run(mcp_auth())
    assert r2.status_code == 401 and r2.json()["context_id"] == "mine-2"


def test_a_reviewed_check_that_no_longer_fits_names_no_budget_id(srv: Live) -> None:
    sync(srv, plan("rv", 100_000, human_review_required=True))
    first = srv.rest().call("check_governance", intent("rv", 60_000)).body["task_id"]
    second = srv.rest().call("check_governance", intent("rv", 60_000)).body["task_id"]
    alice = srv.key("alice", "approver", ("finance",))
    for task_id in (first, second):
        voted = srv.http.post(
            f"/v1/approvals/{task_id}/approve",
            json={"reason": "ok"},
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert voted.status_code == 200, voted.text
    result = srv.rest().call("get_task_status", {"task_id": second}).body["result"]
    assert result["verdict"] == "denied", result
    assert "adcp:" not in json.dumps(result) and "no longer has room" in result["explanation"]


# -- push_notification_config on an intent check (decision 1008) -----------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:18810/hook",
        "http://169.254.169.254/latest/meta-data/",
        "file:///etc/passwd",
        "https://buyer.example/hook",
    ],
)
def test_an_intent_check_with_a_push_config_is_refused_not_ignored(srv: Live, url: str) -> None:
    """Warden sends no AdCP push notifications: a check that could answer `submitted`
    with a push config is refused UNSUPPORTED_FEATURE before anything is filed."""
    sync(srv, plan("reviewed", 1000, human_review_required=True))
    before = srv.rt.store.counts()
    check = intent("reviewed", 100, push_notification_config={"url": url})
    r = srv.rest().call("check_governance", check)
    assert (r.status, r.code) == (404, "UNSUPPORTED_FEATURE")
    assert r.body["adcp_error"]["field"] == "push_notification_config"
    assert "poll get_task_status" in r.body["adcp_error"]["message"]
    assert srv.rt.store.counts() == before  # no review, check or entry was written
    # The same check without it is the submitted review, polled as documented.
    del check["push_notification_config"]
    submitted = srv.rest().call("check_governance", check)
    assert (submitted.status, submitted.body["status"]) == (202, "submitted")


def test_a_push_config_on_a_synchronous_task_is_still_accepted(srv: Live) -> None:
    """sync_plans answers inline: AdCP sends no task webhook for it, so the envelope
    field is accepted there, as the spec requires of every envelope field."""
    r = srv.rest().call(
        "sync_plans",
        {
            "idempotency_key": str(uuid.uuid4()),
            "plans": [plan("inline", 1000)],
            "push_notification_config": {"url": "https://buyer.example/hook"},
        },
    )
    assert (r.status, r.body["status"]) == (200, "completed")
