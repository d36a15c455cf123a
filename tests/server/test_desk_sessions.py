"""Desk sessions end on the server (issue 14 item 5): logging out of the desk, or
revoking the key, makes a copied session cookie worthless.

A real `warden serve` on each store backend, driven by a real HTTP client (httpx): log
in, copy the cookie, log out, replay the copy. A second replica on the same database
must refuse the copy too (the sessions live in the database, not in a process).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from conftest import BACKEND_IDS, Server, postgres_schema, start_server

from warden.server.desk import SESSION_COOKIE

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, html
    return found.group(1)


POLICY = Path(__file__).resolve().parents[2] / "examples" / "policies" / "default.yaml"


@pytest.fixture(scope="module", params=BACKEND_IDS)
def replicas(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server, str]]:
    """Two servers on one database (own data directories, the same IKM), and its URL.
    Shared by the module's tests on each backend: each test logs in with its own new key."""
    tmp_path = tmp_path_factory.mktemp("desk-sessions")
    with ExitStack() as stack:
        if request.param == "sqlite":
            database_url = f"sqlite:///{tmp_path / 'warden.db'}"
        else:
            database_url = stack.enter_context(postgres_schema())
        first = start_server(tmp_path / "a", POLICY, "--database-url", database_url)
        stack.callback(first.stop)
        second = start_server(tmp_path / "b", POLICY, "--database-url", database_url)
        stack.callback(second.stop)
        yield first, second, database_url


def keys(server: Server, database_url: str, *args: str) -> str:
    """``warden keys …`` against the servers' database; its standard output."""
    cmd = [sys.executable, "-m", "warden", "keys", *args]
    cmd += ["--data-dir", str(server.data_dir), "--database-url", database_url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def approver_token(server: Server, database_url: str) -> tuple[str, str]:
    """(key id, token) of a new approver key (``warden keys create``)."""
    out = keys(
        server,
        database_url,
        "create",
        "--principal",
        "alice",
        "--role",
        "approver",
        "--group",
        "operators",
        "--json",
    )
    created = json.loads(out)
    return created["key_id"], created["token"]


def log_in(client: httpx.Client, token: str) -> str:
    """Log in through the form; the session cookie's value."""
    form = client.get("/desk/login")
    r = client.post("/desk/login", data={"token": token, "csrf_token": csrf_of(form.text)})
    assert r.status_code == 303 and r.headers["location"] == "/desk", r.text
    cookie = client.cookies.get(SESSION_COOKIE)
    assert cookie
    assert client.get("/desk").status_code == 200
    return cookie


def with_cookie(url: str, cookie: str) -> httpx.Client:
    client = httpx.Client(base_url=url, follow_redirects=False)
    client.cookies.set(SESSION_COOKIE, cookie, path="/desk")
    return client


def test_logout_ends_the_session_for_every_copy_of_the_cookie(
    replicas: tuple[Server, Server, str],
) -> None:
    first, second, url = replicas
    _, token = approver_token(first, url)
    with httpx.Client(base_url=first.url, follow_redirects=False) as browser:
        copied = log_in(browser, token)
        # The copy works while the session lives, on this replica and on the other.
        with with_cookie(first.url, copied) as thief:
            assert thief.get("/desk").status_code == 200
        with with_cookie(second.url, copied) as thief:
            assert thief.get("/desk").status_code == 200
        page = browser.get("/desk")
        r = browser.post("/desk/logout", data={"csrf_token": csrf_of(page.text)})
        assert r.status_code == 303 and r.headers["location"] == "/desk/login"
    for url in (first.url, second.url):
        with with_cookie(url, copied) as thief:
            r = thief.get("/desk")
            assert r.status_code == 303, r.text
            assert r.headers["location"].startswith("/desk/login")


def test_revoking_the_key_ends_its_desk_sessions(replicas: tuple[Server, Server, str]) -> None:
    first, second, url = replicas
    key_id, token = approver_token(first, url)
    with httpx.Client(base_url=first.url, follow_redirects=False) as browser:
        copied = log_in(browser, token)
    keys(second, url, "revoke", key_id)
    for url in (first.url, second.url):
        with with_cookie(url, copied) as thief:
            assert thief.get("/desk").status_code == 303
