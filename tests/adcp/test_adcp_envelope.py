"""The AdCP envelope and the failures of every kind, over the REST binding of a real
server: each reply validated against the seed ``001_…`` envelope and its task schema
(:func:`adcp_helpers.check_response`, called on every reply)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from adcp_helpers import Live, intent, live, plan

from warden.runtime import Runtime


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    from conftest import DEFAULT_POLICY, write_key

    from warden.settings import Settings

    data = tmp_path_factory.mktemp("adcp-envelope")
    settings = Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=write_key(data / "ikm.key"))
    rt = Runtime.start(settings)
    try:
        with live(rt) as s:
            yield s
    finally:
        rt.close()


def sync(srv: Live, *plans: dict[str, Any], token: str | None = "agent") -> Any:
    return srv.rest(token).call("sync_plans", {"idempotency_key": _key(), "plans": list(plans)})


def _key() -> str:
    import uuid

    return str(uuid.uuid4())


def test_context_is_echoed_byte_for_byte(srv: Live) -> None:
    raw_context = '{"b": 1.50, "a":"caf\\u00e9", "n": [1e2, {"z": null}]}'
    raw = ('{"adcp_major_version": 3, "context": ' + raw_context + "}").encode()
    r = srv.rest().call("get_adcp_capabilities", raw=raw)
    assert r.status == 200 and r.body["status"] == "completed"
    assert b'"context":' + raw_context.encode() in r.raw
    assert r.body["replayed"] is False and r.body["adcp_version"] == "3.2"
    caps = r.body["adcp"]
    assert caps["major_versions"] == [3] and caps["idempotency"]["supported"] is True
    assert caps["idempotency"]["replay_ttl_seconds"] == 86400
    assert r.body["supported_protocols"] == ["governance"]
    # No context in, none out; a caller's context_id is kept.
    r = srv.rest().call("get_adcp_capabilities", {"context_id": "ctx_mine"})
    assert "context" not in r.body and r.body["context_id"] == "ctx_mine"


def test_failures_carry_errors_and_adcp_error(srv: Live) -> None:
    ctx = {"correlation_id": "fail-1"}
    short = {"idempotency_key": "short", "plan_id": "p", "outcome": "failed", "context": ctx}
    cases: list[tuple[str, Any, str, int]] = [
        ("no_such_task", {"context": ctx}, "UNSUPPORTED_FEATURE", 404),
        ("get_adcp_capabilities", {"adcp_major_version": 2, "context": ctx},
         "VERSION_UNSUPPORTED", 400),
        ("sync_plans", {"plans": [plan()], "context": ctx}, "INVALID_REQUEST", 400),
        ("check_governance", {"plan_id": "x", "context": ctx}, "INVALID_REQUEST", 400),
        ("check_governance", {**intent("nope", 10), "context": ctx}, "PLAN_NOT_FOUND", 404),
        ("get_task_status", {"task_id": "task_nope", "context": ctx}, "REFERENCE_NOT_FOUND", 404),
        ("report_plan_outcome", short, "INVALID_REQUEST", 400),
    ]  # fmt: skip
    for task, body, code, status in cases:
        r = srv.rest().call(task, body)
        assert (r.code, r.status) == (code, status), (task, r.body)
        assert r.body["context"] == ctx, r.body
    missing = srv.rest().call("sync_plans", {"plans": [plan()]})
    assert missing.body["adcp_error"]["field"] == "idempotency_key"
    assert missing.body["adcp_error"]["issues"][0]["keyword"] == "required"
    # A body that is not JSON, and a JSON array.
    assert srv.rest().call("sync_plans", raw=b"{nope").code == "INVALID_REQUEST"
    assert srv.rest().call("sync_plans", raw=b"[]").code == "INVALID_REQUEST"


def test_authentication_and_roles(srv: Live) -> None:
    r = srv.rest(None).call("get_adcp_capabilities", {})
    assert (r.code, r.status) == ("AUTH_MISSING", 401)
    r = srv.rest("wdn_000000000000_" + "A" * 43).call("get_adcp_capabilities", {})
    assert (r.code, r.status) == ("AUTH_INVALID", 401)
    approver = srv.key("alice", "approver", ("finance",))
    r = srv.rest(approver).call("get_adcp_capabilities", {})
    assert (r.code, r.status) == ("PERMISSION_DENIED", 403)
    # x-adcp-auth works as well as Authorization.
    r = srv.rest(None).call("get_adcp_capabilities", {}, **{"x-adcp-auth": srv.agent_token})
    assert r.status == 200


def test_absent_and_not_yours_are_one_answer(srv: Live) -> None:
    assert sync(srv, plan("mine-only")).status == 200
    other = srv.key("other-agent", "agent")
    replies = [
        srv.rest(other).call("check_governance", intent("mine-only", 100)),
        srv.rest(other).call("check_governance", intent("never-synced", 100)),
    ]
    shapes = [
        (r.status, {k: v for k, v in r.body.items() if k not in ("timestamp", "context_id")})
        for r in replies
    ]
    assert shapes[0][1]["adcp_error"]["message"] != ""
    shapes[1][1]["adcp_error"]["message"] = shapes[1][1]["adcp_error"]["message"].replace(
        "never-synced", "mine-only"
    )
    shapes[1][1]["errors"] = [shapes[1][1]["adcp_error"]]
    shapes[1][1]["message"] = shapes[1][1]["adcp_error"]["message"]
    assert shapes[0] == shapes[1]
    # Audit logs leave another caller's plan out exactly as an unknown one.
    logs = srv.rest(other).call("get_plan_audit_logs", {"plan_ids": ["mine-only", "never-synced"]})
    assert logs.body["plans"] == []


def test_sync_plans_versions_and_budget(srv: Live) -> None:
    p = plan("versioned", total=5000)
    first = sync(srv, p)
    assert first.body["plans"] == [{"plan_id": "versioned", "status": "active", "version": 1}]
    assert sync(srv, p).body["plans"][0]["version"] == 1  # identical: unchanged
    p2 = json.loads(json.dumps(p))
    p2["budget"]["total"] = 6000
    assert sync(srv, p2).body["plans"][0]["version"] == 2
    p3 = json.loads(json.dumps(p2))
    p3["budget"]["currency"] = "EUR"
    r = sync(srv, p3)
    assert (
        r.code == "INVALID_REQUEST" and r.body["adcp_error"]["field"] == "plans[0].budget.currency"
    )
    logs = srv.rest().call("get_plan_audit_logs", {"plan_ids": ["versioned"]}).body["plans"][0]
    assert logs["plan_version"] == 2 and logs["budget"]["authorized"] == 6000


def test_jwks_is_published(srv: Live) -> None:
    jwks = srv.http.get("/.well-known/jwks.json").json()
    # The governance-token key and the RFC 9421 webhook key: one purpose each.
    by_use = {k["adcp_use"]: k for k in jwks["keys"] if "adcp_use" in k}
    assert sorted(by_use) == ["governance-signing", "request-signing"]
    assert by_use["governance-signing"]["kid"] != by_use["request-signing"]["kid"]
    for key in by_use.values():
        assert key["kty"] == "OKP" and key["crv"] == "Ed25519" and key["alg"] == "EdDSA"
        assert key["key_ops"] == ["verify"] and "d" not in key
    # Beside them, Warden's own keys as at GET /v1/keys (issue 21): Ed25519, ML-DSA-65.
    own = [k for k in jwks["keys"] if "adcp_use" not in k]
    assert [k["kty"] for k in own] == ["OKP", "AKP"] and own[1]["alg"] == "ML-DSA-65"
    assert all("d" not in k and "priv" not in k for k in jwks["keys"])
