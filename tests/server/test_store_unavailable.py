"""A store that fails answers each wire's "unavailable", never a 500 (issue 14 item 7).

The database is taken away from a running Warden three ways: a SQLite or PostgreSQL
database whose key table can no longer be read, and a PostgreSQL server that stops
answering (a TCP proxy between them drops every connection). Then ``/adcp/<task>`` and
``/mcp`` answer AdCP's ``GOVERNANCE_UNAVAILABLE`` (503, ``Retry-After``), ``POST
/desk/login`` the desk's 503 page, and nothing in the database changed. ``/readyz``
answers 503 when writes fail (another connection holds the write lock) even though
the database still answers reads, and 503 when it cannot be reached. A held write lock
is logged once per request as a warning, with no traceback."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    DEFAULT_POLICY,
    assert_valid_response,
    ensure_agent,
    postgres_schema,
    service_client,
    write_key,
)
from fastapi.testclient import TestClient
from outage import TcpProxy, damage, hold_write_lock, repair
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from warden.runtime import HoldExpirer, Runtime
from warden.server.app import create_app
from warden.settings import Settings
from warden.store.schema import metadata

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
MCP_HEADERS = {"accept": "application/json, text/event-stream"}
#: The lock wait the held-lock test configures (database_lock_timeout_ms).
LOCK_WAIT_MS = 1000


@dataclass
class Outage:
    rt: Runtime
    url: str  # the database itself (not the proxy)
    start: Callable[[], None]
    end: Callable[[], None]


def _plan(plan_id: str) -> dict[str, Any]:
    return {
        "plan_id": plan_id,
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "Q2 outdoor",
        "budget": {"total": 1000, "currency": "USD", "reallocation_threshold": 1000},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }


def _sync(plan_id: str) -> dict[str, Any]:
    return {
        "adcp_major_version": 3,
        "idempotency_key": str(uuid.uuid4()),
        "plans": [_plan(plan_id)],
    }


@pytest.fixture(params=["sqlite-unreadable", "postgresql-unreadable", "postgresql-unreachable"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    backend, how = str(request.param).split("-")
    with ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'warden.db'}"
        else:
            url = stack.enter_context(postgres_schema())
        served = url
        start: Callable[[], None] = lambda: damage(url)  # noqa: E731
        end: Callable[[], None] = lambda: repair(url)  # noqa: E731
        if how == "unreachable":
            proxy = TcpProxy(("127.0.0.1", make_url(url).port or 5432))
            stack.callback(proxy.close)
            served = proxy.url(url)
            start, end = proxy.down, proxy.up
        data = tmp_path / "data"
        settings = Settings(
            data_dir=data,
            policy=DEFAULT_POLICY,
            key_file=write_key(data / "ikm.key"),
            database_url=served,
        )
        rt = Runtime.start(settings)
        stack.callback(rt.close)
        yield Outage(rt, url, start, end)


def snapshot(url: str) -> dict[str, int]:
    """Row counts of every Warden table, read straight from the database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for t in metadata.sorted_tables
            }
    finally:
        engine.dispose()


def _assert_unavailable(r: Any) -> dict[str, Any]:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["retry-after"] == "5"
    body: dict[str, Any] = r.json()
    assert body["status"] == "failed"
    assert body["adcp_error"] == body["errors"][0]
    assert body["adcp_error"]["code"] == "GOVERNANCE_UNAVAILABLE"
    assert body["adcp_error"]["recovery"] == "transient"
    return body


def test_adcp_rest_and_mcp_answer_governance_unavailable(outage: Outage) -> None:
    ensure_agent(outage.rt, "buyer")
    _, token = outage.rt.api_keys.create("buyer", "agent")
    auth = {"authorization": f"Bearer {token}"}
    with TestClient(create_app(outage.rt)) as client:
        assert (
            client.post("/adcp/sync_plans", json=_sync("before"), headers=auth).status_code == 200
        )
        before = snapshot(outage.url)
        outage.start()
        try:
            rest = client.post("/adcp/sync_plans", json=_sync("during"), headers=auth)
            assert rest.headers["x-adcp-status"] == "failed"
            _assert_unavailable(rest)
            check = client.post(
                "/adcp/check_governance",
                json={"plan_id": "before", "caller": "https://a.example", "tool": "x"},
                headers=auth,
            )
            _assert_unavailable(check)
            call = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {
                    "name": "sync_plans",
                    "arguments": {**_sync("mcp"), "context_id": "ctx-mcp-1"},
                },
            }
            mcp = client.post("/mcp", content=json.dumps(call), headers={**auth, **MCP_HEADERS})
            assert _assert_unavailable(mcp)["context_id"] == "ctx-mcp-1"
        finally:
            outage.end()
        assert snapshot(outage.url) == before  # nothing was written
        # The same wire works again once the database is back.
        assert client.post("/adcp/sync_plans", json=_sync("after"), headers=auth).status_code == 200


def test_desk_login_answers_its_503_page(outage: Outage) -> None:
    _, token = outage.rt.api_keys.create("alice", "approver", ("operators",))
    with TestClient(create_app(outage.rt), follow_redirects=False) as client:
        form = client.get("/desk/login")
        csrf = CSRF.search(form.text)
        assert form.status_code == 200 and csrf is not None
        before = snapshot(outage.url)
        outage.start()
        try:
            r = client.post("/desk/login", data={"token": token, "csrf_token": csrf.group(1)})
        finally:
            outage.end()
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers["retry-after"] == "5"
        assert "Approval desk unavailable" in r.text and "nothing was changed" in r.text
        assert client.get("/desk").status_code == 303  # not logged in
        assert snapshot(outage.url) == before
        form = client.get("/desk/login")
        csrf = CSRF.search(form.text)
        assert csrf is not None
        ok = client.post("/desk/login", data={"token": token, "csrf_token": csrf.group(1)})
        assert ok.status_code == 303 and ok.headers["location"] == "/desk"


def _probe_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            sql = "SELECT count(*) FROM server_secrets WHERE name LIKE 'readyz-probe-%'"
            return int(conn.execute(text(sql)).scalar_one())
    finally:
        engine.dispose()


def test_readyz_is_unavailable_while_writes_wait_on_a_lock(
    make_backend_runtime: Callable[..., Runtime], database_url: str
) -> None:
    rt = make_backend_runtime()
    with TestClient(create_app(rt)) as client:
        assert client.get("/readyz").status_code == 200
        before = snapshot(database_url)
        with hold_write_lock(database_url):
            rt.store.ping()  # reads still work: SELECT 1 alone would say "ready"
            r = client.get("/readyz")
            assert r.status_code == 503, r.text
            assert r.json() == {"status": "unavailable", "reason": "store_not_writable"}
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert snapshot(database_url) == before  # the probe's write was rolled back
        assert _probe_rows(database_url) == 0


def test_readyz_is_unavailable_while_postgresql_is_unreachable(tmp_path: Path) -> None:
    with postgres_schema() as url:
        proxy = TcpProxy(("127.0.0.1", make_url(url).port or 5432))
        data = tmp_path / "data"
        settings = Settings(
            data_dir=data,
            policy=DEFAULT_POLICY,
            key_file=write_key(data / "ikm.key"),
            database_url=proxy.url(url),
        )
        rt = Runtime.start(settings)
        try:
            with TestClient(create_app(rt)) as client:
                assert client.get("/readyz").status_code == 200
                proxy.down()
                r = client.get("/readyz")
                assert r.status_code == 503, r.text
                assert r.json()["status"] == "unavailable"
                proxy.up()
                assert client.get("/readyz").status_code == 200
        finally:
            rt.close()
            proxy.close()


def _assert_one_quiet_warning(
    caplog: pytest.LogCaptureFixture, needle: str, *, ticks: bool = False
) -> None:
    """A locked database was logged as one warning naming ``needle`` (``ticks``: one per
    tick of a loop): nothing at ERROR, no traceback (the lock is an outage the caller
    retries, not a bug)."""
    records = [r for r in caplog.records if r.name.startswith("warden")]
    assert [r for r in records if r.levelno >= logging.ERROR] == [], caplog.text
    assert [r for r in records if r.exc_info] == [], caplog.text
    assert "Traceback" not in caplog.text
    warned = [r for r in records if r.levelno == logging.WARNING]
    assert len(warned) >= 1 if ticks else len(warned) == 1, caplog.text
    assert all(needle in r.getMessage() for r in warned), caplog.text


def test_a_held_write_lock_is_one_warning_per_request_and_fails_closed(
    make_backend_runtime: Callable[..., Runtime],
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A short lock wait (database_lock_timeout_ms) so the three refusals below take
    # seconds, not the 10 s (SQLite) / 5 s (PostgreSQL) default each.
    rt = make_backend_runtime(database_lock_timeout_ms=LOCK_WAIT_MS)
    acs = service_client(rt)
    acs.hello()
    assert acs.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    body = {"kind": "org", "currency": "USD", "cap": "10", "period": "none"}
    auth = {"authorization": f"Bearer {rt.api_token}"}
    with TestClient(create_app(rt)) as client:
        before = snapshot(database_url)
        with hold_write_lock(database_url, every_table=True):
            caplog.clear()
            with caplog.at_level(logging.INFO):
                started = time.monotonic()
                r = client.put("/v1/budgets/x", json=body, headers=auth)
                waited = time.monotonic() - started
            assert r.status_code == 503, r.text
            # It waited for the lock (the setting reached the connection), not failed at once.
            assert waited >= LOCK_WAIT_MS / 1000 * 0.9, waited
            assert r.json()["blockedBy"] == "store:unavailable"
            _assert_one_quiet_warning(caplog, "StoreUnavailable")

            caplog.clear()
            with caplog.at_level(logging.INFO):
                denied = acs.tool_call("send_money", {"to": "bob", "amount": 5})
            assert_valid_response(denied)  # signed, and verified by the client
            assert denied["result"]["decision"] == "deny"
            _assert_one_quiet_warning(caplog, "signed deny after failure")

            caplog.clear()
            with caplog.at_level(logging.INFO):
                expirer = HoldExpirer(rt.spend, 0.01)
                try:
                    deadline = time.monotonic() + 30
                    while not caplog.records and time.monotonic() < deadline:
                        time.sleep(0.05)
                finally:
                    expirer.stop()
            _assert_one_quiet_warning(caplog, "releasing expired spend holds failed", ticks=True)
        # The log's checkpoint worker may sign a checkpoint of the earlier sessionStart
        # once the lock is released: that is no write of the refused requests.
        after = snapshot(database_url)
        assert after.pop("log_checkpoints") >= before.pop("log_checkpoints")
        assert after == before
