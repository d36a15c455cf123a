"""The metrics endpoint and the approval desk's login refuse more than one credential
in their own formats (decisions 841, 842): two ``Authorization`` lines on ``/metrics``
are its 401 ``{"error": ...}`` from any client, loopback included; a login form with two
``token`` fields is the login page again with 401 and no session."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from urllib.parse import urlencode

import httpx
import pytest
from conftest import ensure_agent
from fastapi.testclient import TestClient

from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.server.desk import SESSION_COOKIE

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _metrics(app: object, peer: str, lines: list[tuple[str, str]]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(peer, 5000))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as c:
            return await c.get("/metrics", headers=lines)

    return asyncio.run(go())


def test_metrics_refuses_two_authorization_lines(runtime: Runtime) -> None:
    app = create_app(runtime)
    gone, revoked = runtime.api_keys.create("admin", Role.ADMIN)
    assert runtime.api_keys.revoke(gone.key_id)
    admin = ("authorization", f"Bearer {runtime.api_token}")
    assert _metrics(app, "203.0.113.7", [admin]).status_code == 200
    for lines in (
        [admin, ("authorization", f"Bearer {revoked}")],
        [("authorization", f"Bearer {revoked}"), admin],
        [admin, admin],
    ):
        for peer in ("203.0.113.7", "127.0.0.1"):
            r = _metrics(app, peer, lines)
            assert r.status_code == 401, r.text
            assert r.headers["www-authenticate"] == 'Bearer realm="warden-metrics"'
            assert "more than one credential was sent" in r.json()["error"]
    # An empty line carries nothing.
    assert _metrics(app, "203.0.113.7", [("authorization", ""), admin]).status_code == 200


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime), follow_redirects=False) as c:
        yield c


def test_desk_login_refuses_two_tokens(runtime: Runtime, client: TestClient) -> None:
    ensure_agent(runtime, "fay", "approver")
    _, fay = runtime.api_keys.create("fay", Role.APPROVER)
    _, gil = runtime.api_keys.create("fay", Role.APPROVER)
    form = client.get("/desk/login")
    found = CSRF.search(form.text)
    assert found is not None
    csrf = found.group(1)
    for tokens in ((fay, gil), (fay, fay), ("not-a-key", fay)):
        body = [("token", t) for t in tokens] + [("csrf_token", csrf)]
        r = client.post(
            "/desk/login",
            content=urlencode(body).encode(),
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 401, r.text
        assert "More than one API key was sent" in r.text
        with runtime.store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM desk_sessions").scalar_one() == 0
    # One token logs in as before.
    r = client.post("/desk/login", data={"token": fay, "csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/desk", r.text
    assert SESSION_COOKIE in r.cookies or client.cookies.get(SESSION_COOKIE)
