"""AdCP ``check_governance`` (REST and ``/mcp``) answers its caller's API key from memory
and confirms it in the check's own transaction (decisions 810–813): a key (or its agent)
revoked on another replica — another runtime on the same database, whose revocation this
process's memory is not told of — is refused from its next check on exactly as an unknown
key is (``AUTH_INVALID``, 401), and nothing is written: no check row, no chain entry, no
hold, no idempotency claim. On SQLite nothing is remembered (every request reads the
key)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from adcp_helpers import intent, plan
from conftest import ensure_agent
from fastapi.testclient import TestClient

from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.store import sql as store_sql
from warden.store.api_keys_sql import SqlApiKeys

VOLATILE = ("timestamp", "context_id")


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


class Buyer:
    """One agent key on replica ``rt``'s REST AdCP wire, a plan synced."""

    def __init__(self, rt: Runtime, client: TestClient) -> None:
        ensure_agent(rt, "buyer-agent")
        who, self.token = rt.api_keys.create("buyer-agent", Role.AGENT)
        self.key_id = who.key_id
        self.client = client
        self.plan_id = f"plan-{uuid.uuid4().hex[:8]}"
        synced = self.call("sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": [
            plan(self.plan_id)
        ]})  # fmt: skip
        assert synced.status_code == 200, synced.text

    def call(self, task: str, body: Any, token: str | None = None, **kw: Any) -> Any:
        headers = {"authorization": f"Bearer {token or self.token}"}
        if isinstance(body, bytes):
            return self.client.post(f"/adcp/{task}", content=body, headers=headers)
        return self.client.post(f"/adcp/{task}", json=body, headers=headers)

    def check(self, amount: int = 10, **extra: Any) -> Any:
        return self.call("check_governance", intent(self.plan_id, amount, **extra))


@pytest.fixture
def buyer(make_runtime: Callable[..., Runtime]) -> Iterator[tuple[Runtime, Buyer]]:
    rt = make_runtime()
    with TestClient(create_app(rt)) as client:
        yield rt, Buyer(rt, client)


def _rows(rt: Runtime) -> tuple[int, ...]:
    tables = ("adcp_checks", "entries", "reservations", "idempotency_keys", "log_events")
    with rt.store.engine.connect() as conn:
        counts = [conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one() for t in tables]
        usage = conn.exec_driver_sql(
            "SELECT budget_id, bucket, reserved, settled FROM budget_usage ORDER BY 1, 2"
        )
        return (*counts, tuple(tuple(row) for row in usage))


def _body(reply: Any) -> dict[str, Any]:
    return {k: v for k, v in reply.json().items() if k not in VOLATILE}


@pytest.mark.parametrize("what", ["key", "agent"])
def test_a_key_revoked_on_another_replica_is_refused_and_changes_nothing(
    make_runtime: Callable[..., Runtime], buyer: tuple[Runtime, Buyer], what: str
) -> None:
    rt, b = buyer
    keyed = intent(b.plan_id, 10, idempotency_key=str(uuid.uuid4()))
    for body in (intent(b.plan_id, 10), keyed):  # the second is answered from memory (PG)
        r = b.call("check_governance", body)
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    assert b.check().json()["status"] == "completed"
    if rt.store.row_locks:
        assert len(rt.api_keys._remembered) == 1  # noqa: SLF001 - the path under test
    before = _rows(rt)
    assert before[2] >= 1  # the checks hold: a revoked key's check would add one

    other = make_runtime()  # another replica on the same database
    if what == "key":
        assert other.api_keys.revoke(b.key_id)
    else:
        assert other.agents is not None
        other.agents.revoke("buyer-agent")
    assert len(rt.api_keys._remembered) == (1 if rt.store.row_locks else 0)  # noqa: SLF001
    before = _rows(rt)  # the revocation's own log event written

    unknown = b.check(token="wdn_000000000000_" + "A" * 43)
    assert unknown.status_code == 401
    refused = b.check()
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"] == 'Bearer realm="warden"'
    assert refused.json()["adcp_error"]["code"] == "AUTH_INVALID"
    assert _body(refused) == _body(unknown)  # exactly what an unknown key gets
    assert not rt.api_keys._remembered  # noqa: SLF001 - forgotten once refused
    assert _rows(rt) == before


@pytest.mark.parametrize("request_kind", ["replay", "schema", "version", "not-json", "empty"])
def test_a_refusal_before_the_transaction_is_still_auth_invalid(
    make_runtime: Callable[..., Runtime], buyer: tuple[Runtime, Buyer], request_kind: str
) -> None:
    """Requests refused before the check's transaction confirms the key (a replay of an
    earlier check's idempotency key, a schema error, an unsupported version, a body that
    is not JSON or is empty) answer a revoked key as today: AUTH_INVALID, nothing
    changed."""
    rt, b = buyer
    keyed = intent(b.plan_id, 10, idempotency_key=str(uuid.uuid4()))
    assert b.call("check_governance", keyed).status_code == 200
    assert b.check().status_code == 200
    make_runtime().api_keys.revoke(b.key_id)
    assert len(rt.api_keys._remembered) == (1 if rt.store.row_locks else 0)  # noqa: SLF001
    before = _rows(rt)
    body: Any = {
        "replay": keyed,
        "schema": {**intent(b.plan_id, 10), "tool": 7},
        "version": {**intent(b.plan_id, 10), "adcp_major_version": 2},
        "not-json": b"{not json",
        "empty": b"",
    }[request_kind]
    r = b.call("check_governance", body)
    assert r.status_code == 401, r.text
    assert r.json()["adcp_error"]["code"] == "AUTH_INVALID"
    assert _rows(rt) == before


def test_a_live_key_is_confirmed_with_the_checks_begin(
    monkeypatch: pytest.MonkeyPatch, buyer: tuple[Runtime, Buyer]
) -> None:
    """The remembered path is really taken on PostgreSQL: the second check reads no key
    outside its transaction, its key check goes with ``BEGIN``, and the transaction
    takes 2 round trips (SQLite: the key is read per request, as before)."""
    rt, b = buyer
    assert b.check().status_code == 200  # authenticated from the database, remembered
    key_reads: list[str] = []
    original = SqlApiKeys.by_hash_with_agent

    def counted(self: SqlApiKeys, secret_hash: str) -> Any:
        key_reads.append(secret_hash)
        return original(self, secret_hash)

    monkeypatch.setattr(SqlApiKeys, "by_hash_with_agent", counted)
    trips: dict[int, list[str]] = {}
    lazy = store_sql._LazyBegin  # noqa: SLF001 - counting what the transaction sends
    send, execute, commit = lazy._send, lazy.execute, lazy.commit  # noqa: SLF001

    def sent(self: Any, last: str) -> None:
        trips.setdefault(id(self), []).append(("BEGIN; " if not self.begun else "") + last)
        send(self, last)

    def executed(self: Any, sql: str, params: Any = None) -> Any:
        if self.begun and not self._pending and sql != "ROLLBACK":  # noqa: SLF001
            trips.setdefault(id(self), []).append(sql)  # a round trip of its own
        return execute(self, sql, params)

    def committed(self: Any, end: str) -> None:
        trips.setdefault(id(self), []).append(end)
        commit(self, end)

    monkeypatch.setattr(lazy, "_send", sent)
    monkeypatch.setattr(lazy, "execute", executed)
    monkeypatch.setattr(lazy, "commit", committed)
    prefetched: list[str] = []
    prefetch = lazy.prefetch

    def noted(self: Any, sql: str, params: Any, receive: Any) -> bool:
        prefetched.append(sql)
        return bool(prefetch(self, sql, params, receive))

    monkeypatch.setattr(lazy, "prefetch", noted)

    # Over the plan's budget: a plan denial, no hold (the bench's case holds nothing
    # either; a hold's expiry scan and writes are the spend engine's own statements).
    r = b.check(200_000)
    assert r.status_code == 200 and r.json()["verdict"] == "denied", r.text
    if not rt.store.row_locks:
        assert key_reads and not trips  # SQLite: read per request, no lazy BEGIN
        return
    assert key_reads == []  # answered from memory
    assert any("FROM api_keys" in sql for sql in prefetched)  # confirmed with BEGIN
    checks = [t for t in trips.values() if "adcp_plans" in t[0]]
    assert len(checks) == 1 and len(checks[0]) == 2, "\n".join(x[:300] for x in checks[0])


def _mcp(b: Buyer, arguments: Any, token: str | None = None) -> Any:
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    call["params"] = {"name": "check_governance", "arguments": arguments}
    headers = {
        "authorization": f"Bearer {token or b.token}",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
    }
    return b.client.post("/mcp", json=call, headers=headers)


@pytest.mark.parametrize("what", ["key", "agent", "key-bad-schema"])
def test_over_mcp_a_key_revoked_on_another_replica_is_refused_and_changes_nothing(
    make_runtime: Callable[..., Runtime],
    buyer: tuple[Runtime, Buyer],
    what: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``/mcp`` answers a revoked key with the endpoint's own HTTP 401, as an unknown
    key, also when the key was answered from memory and refused in the tool's
    transaction, or before it (a schema error; decision 813)."""
    rt, b = buyer
    key_reads: list[str] = []
    original = SqlApiKeys.by_hash_with_agent

    def counted(self: SqlApiKeys, secret_hash: str) -> Any:
        key_reads.append(secret_hash)
        return original(self, secret_hash)

    monkeypatch.setattr(SqlApiKeys, "by_hash_with_agent", counted)
    for _ in range(2):  # the second is answered from memory (PG)
        r = _mcp(b, intent(b.plan_id, 10))
        assert r.status_code == 200, r.text
        assert r.json()["result"]["structuredContent"]["status"] == "completed", r.text
    assert len(key_reads) == (1 if rt.store.row_locks else 2)
    assert len(rt.api_keys._remembered) == (1 if rt.store.row_locks else 0)  # noqa: SLF001
    other = make_runtime()
    if what == "agent":
        assert other.agents is not None
        other.agents.revoke("buyer-agent")
    else:
        assert other.api_keys.revoke(b.key_id)
    before = _rows(rt)
    unknown = _mcp(b, intent(b.plan_id, 10), token="wdn_000000000000_" + "A" * 43)
    assert unknown.status_code == 401
    args = (
        {**intent(b.plan_id, 10), "tool": 7} if what == "key-bad-schema" else intent(b.plan_id, 10)
    )
    refused = _mcp(b, args)
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"] == 'Bearer realm="warden"'
    assert _body(refused) == _body(unknown)
    assert not rt.api_keys._remembered  # noqa: SLF001 - forgotten once refused
    assert _rows(rt) == before
