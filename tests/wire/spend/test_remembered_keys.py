"""An API key answered from memory is confirmed unrevoked in the request's transaction
(decision 702): a key or agent revoked elsewhere (another replica: here, straight in the
shared database, so this process's memory is not told) changes nothing and is answered
401 from its next quote or action request on, on SQLite and on PostgreSQL."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import ensure_agent
from spend_wire_helpers import Api, assert_error, db_rows, open_api

from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.spend import Budget, BudgetKind, Period

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kla"))
from kla_wire_helpers import BASIC, load  # noqa: E402


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


@pytest.fixture
def bot(runtime: Runtime) -> Iterator[tuple[Api, str]]:
    ensure_agent(runtime, "bot-1", Role.AGENT)
    who, token = runtime.api_keys.create("bot-1", Role.AGENT)
    runtime.spend.define_budget(
        Budget("b", BudgetKind.ORG, "USD", Decimal(1000), Period.NONE, principals=("bot-1",))
    )
    for api in open_api(runtime):
        yield Api(api.client, token), who.key_id


def _revoke_elsewhere(rt: Runtime, sql: str, param: str) -> None:
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql(sql.replace("?", "%s" if rt.store.row_locks else "?"), (param,))


def _submit(api: Api, record: dict[str, Any]) -> int:
    """A KLA action request's HTTP status (its envelope is not the spend wire's)."""
    headers = {"Authorization": f"Bearer {api.token}"}
    return int(api.client.post("/v1/action-requests", json=record, headers=headers).status_code)


def _counts(rt: Runtime) -> tuple[Any, ...]:
    return (
        db_rows(rt, "SELECT count(*) FROM entries")[0][0],
        db_rows(rt, "SELECT count(*) FROM reservations")[0][0],
        db_rows(rt, "SELECT count(*) FROM idempotency_keys")[0][0],
        db_rows(rt, "SELECT count(*) FROM kla_records")[0][0],
    )


@pytest.mark.parametrize(
    "revocation",
    [
        "UPDATE api_keys SET revoked_at = '2026-01-01T00:00:00Z' WHERE key_id = ?",
        "UPDATE agents SET revoked_at = '2026-01-01T00:00:00Z' WHERE agent_id = "
        "(SELECT principal FROM api_keys WHERE key_id = ?)",
    ],
    ids=["key", "agent"],
)
def test_a_key_revoked_elsewhere_changes_nothing(
    runtime: Runtime, bot: tuple[Api, str], revocation: str
) -> None:
    api, key_id = bot
    for i in range(2):  # the second is answered from memory on PostgreSQL
        r = api.quote("b", "5", key=f"remembered-key-{i}")
        assert r.status == 200, r.body
    record = {**load(BASIC), "action_request_id": "req_remembered_0001"}
    assert _submit(api, record) == 200
    if runtime.store.row_locks:
        assert len(runtime.api_keys._remembered) == 1  # noqa: SLF001 - the path under test
    before = _counts(runtime)
    _revoke_elsewhere(runtime, revocation, key_id)
    assert_error(
        api.quote("b", "5", key="remembered-key-after"),
        "auth:required",
        401,
        resolution="authenticate",
    )
    # The stored answer of an earlier request is not replayed to it either.
    assert api.quote("b", "5", key="remembered-key-0").status == 401
    again = {**record, "action_request_id": "req_remembered_0002"}
    assert _submit(api, again) == 401
    assert _counts(runtime) == before
    assert not runtime.api_keys._remembered  # noqa: SLF001 - forgotten once refused
