"""A single-valued query parameter given twice is refused 400 in the wire's own error
format (decision 1035). Before, ``?principal=a&principal=b`` silently read as
``principal=b``: the caller could not tell which value counted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import bearer, ensure_agent
from fastapi.testclient import TestClient
from test_desk_pages import login

from warden.core.media import repeated_params, repeated_params_problem
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime), follow_redirects=False) as c:
        yield c


def test_the_rule_names_each_repeated_single_valued_parameter_once() -> None:
    pairs = [("a", "1"), ("b", "2"), ("a", "3"), ("list", "x"), ("list", "y"), ("a", "4")]
    assert repeated_params(pairs, ("a", "b")) == ["a"]
    assert repeated_params(pairs, ("b",)) == []
    assert repeated_params(pairs, ("a", "list")) == ["a", "list"]
    assert repeated_params_problem(pairs, ("b",)) is None
    assert "a" in (repeated_params_problem(pairs, ("a",)) or "")


@pytest.mark.parametrize(
    ("path", "role"),
    [
        ("/v1/executions/exec_1/evidence?principal=bot-1&principal=bot-2", Role.ADMIN),
        ("/v1/action-requests/req_1?principal=a&principal=a", Role.APPROVER),
        ("/v1/kla-records/rec_1?principal=a&principal=b", Role.ADMIN),
        ("/v1/approvals?limit=1&limit=500", Role.APPROVER),
        ("/v1/approvals?state=all&group=x&state=pending", Role.APPROVER),
    ],
)
def test_a_repeated_parameter_on_v1_is_a_400_envelope(
    runtime: Runtime, client: TestClient, path: str, role: Role
) -> None:
    r = client.get(path, headers=bearer(runtime, "root", role))
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["blockedBy"] == "input:invalid", body
    name = path.split("?")[1].split("=")[0]
    assert f"query parameter {name} is given more than once" in body["message"], body


def test_one_value_and_a_list_are_still_read(runtime: Runtime, client: TestClient) -> None:
    headers = bearer(runtime, "root", Role.APPROVER)
    r = client.get("/v1/approvals?limit=2&state=all", headers=headers)
    assert r.status_code == 200, r.text
    # An undeclared parameter is refused as unknown (decision 1180), not as repeated.
    r = client.get("/v1/approvals?x=1&x=2", headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith("unknown query parameter x;"), r.text
    r = client.get("/v1/kla-records/rec_1?principal=a", headers=headers)
    assert r.status_code == 404, r.text


def test_the_authentication_check_still_comes_first(client: TestClient) -> None:
    r = client.get("/v1/approvals?limit=1&limit=2")
    assert r.status_code == 401, r.text


def test_the_log_key_refuses_two_algs(runtime: Runtime, client: TestClient) -> None:
    if runtime.tlog is None:
        pytest.fail("the transparency log is on by default")
    r = client.get("/v1/log/key?alg=ml-dsa-65&alg=ed25519")
    assert r.status_code == 400, r.text
    assert r.json()["blockedBy"] == "log:invalid_params"
    assert "alg" in r.json()["message"]
    assert client.get("/v1/log/key").status_code == 200


def test_the_log_key_refuses_an_unknown_alg(runtime: Runtime, client: TestClient) -> None:
    """Before: ``alg=bogus`` answered 200 with the Ed25519 key, as if it were asked for."""
    if runtime.tlog is None:
        pytest.fail("the transparency log is on by default")
    for query in ("alg=bogus", "alg=", "alg=ED25519"):
        r = client.get(f"/v1/log/key?{query}")
        assert r.status_code == 400, (query, r.text)
        assert r.json()["blockedBy"] == "log:invalid_params"
        assert "ed25519 or ml-dsa-65" in r.json()["message"]
    plain = client.get("/v1/log/key")
    assert plain.status_code == 200
    assert client.get("/v1/log/key?alg=ed25519").text == plain.text


def test_the_desk_pages_refuse_a_repeated_filter(runtime: Runtime, client: TestClient) -> None:
    ensure_agent(runtime, "ann", Role.ADMIN)
    _, token = runtime.api_keys.create("ann", Role.ADMIN, ())
    login(client, token)
    r = client.get("/desk?state=all&state=pending")
    assert r.status_code == 400, r.text
    assert "state is given more than once" in r.text
    r = client.get("/desk/ops?agent=a&agent=b")
    assert r.status_code == 400, r.text
    assert "agent is given more than once" in r.text
    assert client.get("/desk?state=all").status_code == 200
    assert client.get("/desk/ops?agent=a").status_code == 200


def test_the_desk_login_and_session_filter_refuse_a_repeat(
    runtime: Runtime, client: TestClient
) -> None:
    """Decision 1142: the login page's `next` (where to go after logging in) silently kept
    the last of two, and this checks the activity page's `session` filter too; each is now
    the desk's own 400 page, as the other desk filters are (decision 1035)."""
    r = client.get("/desk/login?next=/desk/ops&next=/desk")
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "next is given more than once" in r.text
    assert client.get("/desk/login?next=/desk/ops").status_code == 200
    ensure_agent(runtime, "ann", Role.ADMIN)
    _, token = runtime.api_keys.create("ann", Role.ADMIN, ())
    login(client, token)
    r = client.get("/desk/login?next=/desk/ops&next=/desk")  # logged in: no redirect either
    assert r.status_code == 400, r.text
    r = client.get("/desk/ops?session=a&session=b")
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "session is given more than once" in r.text
    assert client.get("/desk/ops?session=a").status_code == 200
