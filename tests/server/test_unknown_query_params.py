"""A query parameter a ``/v1`` route does not take is refused 400, naming it and the ones
the route takes (decision 1180). Before, it was silently ignored: ``GET
/v1/approvals?State=approved`` (the route takes ``state``) answered the unfiltered
pending list, and the caller could not tell its filter did nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime), follow_redirects=False) as c:
        yield c


def test_the_rule_names_the_unknown_parameters_and_the_routes_own() -> None:
    from warden.core.media import query_params_problem, unknown_params

    pairs = [("State", "approved"), ("limit", "1"), ("x", "1"), ("x", "2")]
    assert unknown_params(pairs, ("state", "limit")) == ["State", "x"]
    assert unknown_params(pairs, ("State", "limit", "x")) == []
    assert query_params_problem(pairs[:2], ("limit", "state"), ("limit", "state")) == (
        "unknown query parameter State; this route takes: limit, state"
    )
    assert query_params_problem(pairs, ("state", "limit"), ()) == (
        "unknown query parameters State, x; this route takes: limit, state"
    )
    assert query_params_problem([("a", "")], (), ()) == (
        "unknown query parameter a; this route takes no query parameters"
    )
    # An unknown name is the caller's text: shown quoted when empty, odd or long.
    assert "'' (an empty name)" in (query_params_problem([("", "x")], ("a",), ()) or "")
    long = query_params_problem([("n" * 5000, "")], ("a",), ()) or ""
    assert len(long) < 200 and "…" in long
    # Known names: the repeat rule (decision 1035) still applies; otherwise no problem.
    assert "given more than once" in (
        query_params_problem(pairs[1:2] * 2, ("limit",), ("limit",)) or ""
    )
    assert query_params_problem(pairs[1:2] * 2, ("limit",), ()) is None
    assert query_params_problem(pairs[1:2], ("limit",), ("limit",)) is None


def test_a_misspelled_filter_is_refused_not_ignored(runtime: Runtime, client: TestClient) -> None:
    headers = bearer(runtime, "fay", Role.APPROVER)
    r = client.get("/v1/approvals?State=approved", headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["blockedBy"] == "input:invalid"
    assert r.json()["message"] == (
        "unknown query parameter State; this route takes: group, limit, state, wire"
    )
    # The route's own parameters (percent-encoded too, as Starlette reads them) still work.
    for query in ("state=approved", "state=all&group=g&wire=spend&limit=5", "%73tate=all", ""):
        r = client.get(f"/v1/approvals?{query}", headers=headers)
        assert r.status_code == 200, (query, r.text)


def _v1_operations(client: TestClient) -> list[tuple[str, str, list[str]]]:
    """(method, path, its declared query parameters) of every /v1 operation Warden lists."""
    spec = client.get("/openapi.json").json()
    found = []
    for path, item in spec["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, op in item.items():
            names = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
            found.append((method.upper(), path, sorted(names)))
    return found


def test_every_v1_route_refuses_a_parameter_it_does_not_take(
    runtime: Runtime, client: TestClient
) -> None:
    """Spend, KLA, approvals, agents and the transparency log: each route answers an
    unknown parameter in its wire's own 400, listing the parameters /openapi.json says
    it takes, before it reads the body (a broken JSON body is not what is reported)."""
    admin = bearer(runtime, "root", Role.ADMIN)
    operations = _v1_operations(client)
    listed = {(m, p) for m, p, _ in operations}
    for expected in [
        ("POST", "/v1/quotes"),
        ("GET", "/v1/budgets"),
        ("PUT", "/v1/budgets/{budget_id}"),
        ("GET", "/v1/kla-records/{record_id}"),
        ("POST", "/v1/action-requests"),
        ("GET", "/v1/approvals"),
        ("POST", "/v1/approvals/{task_id}/approve"),
        ("GET", "/v1/agents"),
        ("POST", "/v1/agents/{agent_id}/revoke"),
        ("GET", "/v1/log/inclusion"),
        ("POST", "/v1/log/cosignatures"),
    ]:
        assert expected in listed, expected
    for method, path, names in operations:
        url = re.sub(r"\{[^}]+\}", "x", path) + "?zz=1"
        body = b"{" if method in ("POST", "PUT") else None
        r = client.request(
            method, url, content=body, headers={**admin, "content-type": "application/json"}
        )
        assert r.status_code == 400, (method, path, r.text)
        gate = "log:invalid_params" if path.startswith("/v1/log/") else "input:invalid"
        assert r.json()["blockedBy"] == gate, (method, path, r.text)
        takes = f"takes: {', '.join(names)}" if names else "takes no query parameters"
        assert r.json()["message"] == f"unknown query parameter zz; this route {takes}", (
            method,
            path,
        )


def test_the_log_routes_list_and_check_their_parameters(
    runtime: Runtime, client: TestClient
) -> None:
    if runtime.tlog is None:
        pytest.fail("the transparency log is on by default")
    spec = {(m, p): n for m, p, n in _v1_operations(client)}
    assert spec[("GET", "/v1/log/inclusion")] == ["index", "size"]
    assert spec[("GET", "/v1/log/consistency")] == ["from", "to"]
    assert spec[("GET", "/v1/log/key")] == ["alg"]
    r = client.get("/v1/log/key?Alg=ml-dsa-65")
    assert r.status_code == 400, r.text
    assert r.json()["message"] == "unknown query parameter Alg; this route takes: alg"
    r = client.get("/v1/log/inclusion?index=0&size=1&Size=2")
    assert r.status_code == 400, r.text
    assert r.json()["message"] == "unknown query parameter Size; this route takes: index, size"
    r = client.get("/v1/log/consistency?from=1&from=1&to=1")
    assert r.status_code == 400, r.text
    assert r.json()["blockedBy"] == "log:invalid_params"
    assert "from is given more than once" in r.json()["message"]
    # Its own parameters are read as before (a missing one is the route's own answer).
    assert client.get("/v1/log/key?alg=ed25519").status_code == 200
    r = client.get("/v1/log/inclusion?index=0")
    assert r.status_code == 400 and "size" in r.json()["message"], r.text


def test_nothing_runs_before_the_refusal(runtime: Runtime, client: TestClient) -> None:
    """A write with an unknown parameter changes nothing: the route never runs."""
    admin = bearer(runtime, "root", Role.ADMIN)
    body = {"agent_id": "bot-q", "owner": "alice"}
    r = client.post("/v1/agents?dry_run=true", json=body, headers=admin)
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith("unknown query parameter dry_run;"), r.text
    assert client.get("/v1/agents/bot-q", headers=admin).status_code == 404
    assert client.post("/v1/agents", json=body, headers=admin).status_code in (200, 201)


def test_the_key_check_comes_first_and_an_unknown_path_is_still_404(
    runtime: Runtime, client: TestClient
) -> None:
    r = client.get("/v1/approvals?State=approved")
    assert r.status_code == 401, r.text
    admin = bearer(runtime, "root", Role.ADMIN)
    r = client.get("/v1/nope?x=1", headers=admin)
    assert r.status_code == 404, r.text
    assert r.json()["blockedBy"] == "input:unknown_route"
