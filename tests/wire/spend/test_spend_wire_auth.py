"""The spend wire's bearer token: generated 0600 on first start, required on every /v1
route (checked before the body is read), compared exactly; the token file is refused
when shared or malformed."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import DEFAULT_POLICY, write_key
from spend_wire_helpers import Api, assert_error, db_rows, open_api, tree

from warden.crypto.keystore import load_api_token, load_or_create_api_token
from warden.errors import ConfigError
from warden.runtime import Runtime
from warden.settings import Settings


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime()


@pytest.fixture
def api(rt: Runtime) -> Iterator[Api]:
    yield from open_api(rt)


CALLS = [
    (
        "POST",
        "/v1/quotes",
        {"budgetId": "acme.ops.bot", "action": "a", "amount": "1", "currency": "USD"},
    ),
    ("POST", "/v1/reservations/res_x/commit", {"actualAmount": "1"}),
    ("POST", "/v1/reservations/res_x/release", None),
    ("GET", "/v1/reservations/res_x", None),
    ("POST", "/v1/receipts/rcp_x/undo", None),
    ("GET", "/v1/budgets", None),
    ("GET", "/v1/budgets/acme", None),
    ("PUT", "/v1/budgets/new", {"kind": "org", "currency": "USD", "cap": "1", "period": "day"}),
    ("POST", "/v1/budget-requests", {"budgetId": "acme", "cap": "500", "reason": "r"}),
    ("GET", "/v1/tasks/task_x", None),
    ("GET", "/v1/not-a-route", None),
]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Bearer ",
        "Bearer wrong-token-of-a-reasonable-length-0123456789",
        "Basic dXNlcjpwYXNz",
        "TOKEN_ONLY",  # the token without a scheme (filled in below)
        "Bearer TOKEN_ONLY extra",
        "Bearer TOKEN_PREFIX",
    ],
)
def test_every_route_requires_the_token(rt: Runtime, api: Api, authorization: str | None) -> None:
    tree(rt)
    if authorization is not None:
        authorization = authorization.replace("TOKEN_ONLY", rt.api_token).replace(
            "TOKEN_PREFIX", rt.api_token[:-1]
        )
    before = db_rows(rt, "SELECT count(*) FROM budgets")
    for method, path, body in CALLS:
        r = api.request(method, path, body, auth=authorization, key="k" * 32)
        got = assert_error(r, "auth:required", 401, resolution="authenticate")
        assert "api.token" in got["resolution"]["hint"]
        assert r.headers["www-authenticate"] == 'Bearer realm="warden"'
        assert rt.api_token not in str(got)
    assert db_rows(rt, "SELECT count(*) FROM budgets") == before
    assert db_rows(rt, "SELECT count(*) FROM reservations") == [(0,)]
    assert db_rows(rt, "SELECT count(*) FROM idempotency_keys") == [(0,)]


def test_the_scheme_is_case_insensitive(rt: Runtime, api: Api) -> None:
    tree(rt)
    assert api.get("/v1/budgets", auth=f"bearer {rt.api_token}").status == 200
    assert api.get("/v1/budgets", auth=f"BEARER  {rt.api_token}").status == 200


def test_auth_is_checked_before_the_body(api: Api) -> None:
    for auth in (None, "Bearer nope"):
        r = api.post(
            "/v1/quotes",
            content=b"{not json",
            headers={"content-type": "application/json"},
            auth=auth,
        )
        assert_error(r, "auth:required", 401, resolution="authenticate")
        big = api.post(
            "/v1/quotes",
            content=b"x" * (2 << 20),
            headers={"content-type": "application/json"},
            auth=auth,
        )
        assert_error(big, "auth:required", 401, resolution="authenticate")


def test_health_and_openapi_stay_public(api: Api) -> None:
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/openapi.json").status_code == 200


# -- the token file -----------------------------------------------------------------------


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_token_created_0600_and_reused(tmp_path: Path, permissive_umask: None) -> None:
    path = tmp_path / "d" / "api.token"
    token, created = load_or_create_api_token(path)
    assert created is True and len(token) >= 43
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == token + "\n"
    assert load_or_create_api_token(path) == (token, False)
    other, _ = load_or_create_api_token(tmp_path / "e" / "api.token")
    assert other != token


def test_runtime_generates_the_token_in_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    rt = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY))
    try:
        assert rt.api_token_created is True
        assert load_api_token(data / "api.token") == rt.api_token
    finally:
        rt.close()
    rt2 = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY))
    try:
        assert (rt2.api_token, rt2.api_token_created) == (rt.api_token, False)
    finally:
        rt2.close()


@pytest.mark.parametrize(
    ("content", "mode", "needle"),
    [
        ("a" * 43, 0o644, "group/others"),
        ("a" * 43, 0o640, "group/others"),
        ("short-token", 0o600, "at least 32"),
        ("x" * 40, 0o600, "degenerate"),
        ("has spaces in the middle of the token value ok", 0o600, "one token"),
        ("", 0o600, "one token"),
    ],
)
def test_bad_token_files_stop_the_start(
    tmp_path: Path, content: str, mode: int, needle: str
) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    token = data / "api.token"
    token.write_text(content + "\n")
    token.chmod(mode)
    with pytest.raises(ConfigError) as info:
        Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY))
    assert needle in info.value.message
    assert str(token) in info.value.message
    assert not (data / "warden.db").exists()  # refused before the database is opened
    assert token.read_text() == content + "\n"  # never replaced


def test_a_configured_token_file_is_used(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    token = tmp_path / "elsewhere.token"
    token.write_text("T" * 20 + "u" * 20 + "\n")
    token.chmod(0o600)
    rt = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY, api_token_file=token))
    try:
        assert rt.api_token == "T" * 20 + "u" * 20
        assert not (data / "api.token").exists()
    finally:
        rt.close()
