"""``/v1`` (spend, KLA action requests, agents, approvals) refuses a request that carries
two ``Authorization`` lines with its invalid-key answer, ``401 auth:required``, whatever
the order and even when both keys are valid, before the key or the body is read: nothing
is written and the chains still verify (decision 840). Starlette's ``headers.get`` read
the first line, so ``Bearer <revoked>`` then ``Bearer <valid>`` was 401 and the other
order 200."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, ensure_agent
from fastapi.testclient import TestClient
from spend_wire_helpers import db_rows, tree

from warden.cli_ledger import verify_chains
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app

RECORD = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "basic-read.json"
QUOTE = {"budgetId": "acme.ops.bot", "action": "buy", "amount": "5", "currency": "USD"}
BUDGET = {"kind": "org", "currency": "USD", "cap": "1", "period": "day"}
AGENT = {"agent_id": "bot-new", "owner": "ops"}

#: (method, path, JSON body or raw bytes); every route class of /v1.
CALLS: list[tuple[str, str, Any]] = [
    ("POST", "/v1/quotes", QUOTE),
    ("GET", "/v1/budgets", None),
    ("PUT", "/v1/budgets/new-one", BUDGET),
    ("POST", "/v1/action-requests", RECORD.read_bytes()),
    ("POST", "/v1/agents", AGENT),
    ("GET", "/v1/approvals", None),
    ("POST", "/v1/approvals/task_x/approve", {}),
    ("GET", "/v1/not-a-route", None),
]

TABLES = ("reservations", "entries", "idempotency_keys", "budgets", "agents", "kla_records")


@pytest.fixture
def world(make_runtime: Callable[..., Runtime]) -> Iterator[tuple[Runtime, TestClient, dict]]:
    rt = make_runtime()
    tree(rt)
    ensure_agent(rt, "bot-1")
    _, agent = rt.api_keys.create("bot-1", Role.AGENT)
    gone, revoked = rt.api_keys.create("admin", Role.ADMIN)
    assert rt.api_keys.revoke(gone.key_id)
    tokens = {"admin": rt.api_token, "agent": agent, "revoked": revoked}
    with TestClient(create_app(rt)) as client:
        yield rt, client, tokens


def _counts(rt: Runtime) -> list[Any]:
    return [db_rows(rt, f"SELECT count(*) FROM {table}") for table in TABLES]


def _chain_ok(rt: Runtime) -> None:
    s = rt.settings
    doc = verify_chains(
        None,
        data_dir=Path(s.data_dir),
        database_url=s.resolved_database_url(),
        key_file=s.key_file,
        no_signatures=False,
        check_log=False,
    ).document
    assert doc["ok"] is True, doc


def _send(client: TestClient, method: str, path: str, body: Any, headers: list) -> Any:
    h = [("content-type", "application/json"), ("idempotency-key", "k" * 32), *headers]
    if isinstance(body, bytes):
        return client.request(method, path, content=body, headers=h)
    return client.request(method, path, json=body, headers=h)


PAIRS = [
    ("revoked", "admin"),
    ("admin", "revoked"),
    ("admin", "admin"),
    ("admin", "agent"),
    ("agent", "admin"),
]


@pytest.mark.parametrize("first,second", PAIRS)
def test_two_authorization_lines_are_refused_everywhere_and_change_nothing(
    world: tuple[Runtime, TestClient, dict], first: str, second: str
) -> None:
    rt, client, tokens = world
    lines = [
        ("authorization", f"Bearer {tokens[first]}"),
        ("Authorization", f"Bearer {tokens[second]}"),
    ]
    before = _counts(rt)
    for method, path, body in CALLS:
        r = _send(client, method, path, body, lines)
        assert r.status_code == 401, (path, r.text)
        got = r.json()
        assert got["blockedBy"] == "auth:required", got
        assert got["resolution"]["type"] == "authenticate"
        assert "more than one credential was sent (2 Authorization headers)" in got["message"]
        assert r.headers["www-authenticate"] == 'Bearer realm="warden"'
        assert all(t not in r.text for t in tokens.values())
    assert _counts(rt) == before
    _chain_ok(rt)
    # One line of the same key is answered as before.
    one = [("authorization", f"Bearer {tokens['admin']}")]
    assert _send(client, "GET", "/v1/budgets", None, one).status_code == 200


def test_an_empty_second_line_and_x_adcp_auth_are_no_credential_on_v1(
    world: tuple[Runtime, TestClient, dict],
) -> None:
    """An empty ``Authorization`` line carries nothing (before, an empty first line hid
    the key after it: 401); ``x-adcp-auth`` is an AdCP header that ``/v1`` never reads,
    so it is not a second credential there."""
    _, client, tokens = world
    good = ("authorization", f"Bearer {tokens['admin']}")
    for extra in (("authorization", ""), ("x-adcp-auth", tokens["revoked"])):
        for lines in ([good, extra], [extra, good]):
            r = _send(client, "GET", "/v1/budgets", None, lines)
            assert r.status_code == 200, r.text
