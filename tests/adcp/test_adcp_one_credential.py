"""A request on the AdCP wire (REST ``/adcp/<task>`` and ``/mcp``) that carries more than
one API key — two ``Authorization`` lines, ``Authorization`` beside ``x-adcp-auth``, two
``x-adcp-auth`` — is refused ``AUTH_INVALID`` (401, the answer an invalid key gets),
whatever the order and even when every key is valid (one key in both ``Authorization``
and ``x-adcp-auth``, as the AdCP SDK sends it, is one key), and changes nothing: no check row,
no chain entry, no hold, and ``warden verify``'s chain walk stays ok (decision 840). An
RFC 9421 signature beside one key is still accepted (decision 563), beside two it is
refused before the signature is verified, so its nonce is not spent (decision 843). An
authentication failure echoes the request's ``context`` object like every other answer
(decision 844)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from adcp_helpers import intent, plan
from conftest import ensure_agent
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from warden.adcp.rfc9421.keys import public_jwk
from warden.adcp.rfc9421.sign import sign_request
from warden.adcp.rfc9421.verify import REQUEST_TAG, HttpRequest
from warden.cli_ledger import verify_chains
from warden.identity.api_keys import Role
from warden.identity.signing_keys import AgentSigningKeys
from warden.runtime import Runtime
from warden.server.app import create_app

KID = "buyer-4-signing"


@dataclass
class World:
    rt: Runtime
    client: TestClient
    t4: str  # buyer-4's key; its plan is plan_id
    t5: str  # buyer-5's key
    rev: str  # buyer-4's revoked key
    plan_id: str


@pytest.fixture
def world(make_runtime: Any) -> Iterator[World]:
    rt = make_runtime()
    with TestClient(create_app(rt)) as client:
        ensure_agent(rt, "buyer-4")
        ensure_agent(rt, "buyer-5")
        _, t4 = rt.api_keys.create("buyer-4", Role.AGENT)
        _, t5 = rt.api_keys.create("buyer-5", Role.AGENT)
        revoked, rev = rt.api_keys.create("buyer-4", Role.AGENT)
        assert rt.api_keys.revoke(revoked.key_id)
        plan_id = f"plan-{uuid.uuid4().hex[:8]}"
        synced = client.post(
            "/adcp/sync_plans",
            json={"idempotency_key": str(uuid.uuid4()), "plans": [plan(plan_id)]},
            headers={"authorization": f"Bearer {t4}"},
        )
        assert synced.status_code == 200, synced.text
        yield World(rt, client, t4, t5, rev, plan_id)


def _pairs(w: World) -> dict[str, list[tuple[str, str]]]:
    def bearer(token: str, name: str = "authorization") -> tuple[str, str]:
        return (name, f"Bearer {token}")

    return {
        "revoked-then-valid": [bearer(w.rev), bearer(w.t4)],
        "valid-then-revoked": [bearer(w.t4), bearer(w.rev)],
        "same-key-twice": [bearer(w.t4), bearer(w.t4, "Authorization")],
        "bearer-and-revoked-x-adcp-auth": [bearer(w.t4), ("x-adcp-auth", w.rev)],
        "bearer-and-other-buyer": [bearer(w.t4), ("x-adcp-auth", w.t5)],
        "x-adcp-auth-then-bearer": [("x-adcp-auth", w.t5), bearer(w.t4)],
        "two-x-adcp-auth": [("x-adcp-auth", w.t4), ("x-adcp-auth", w.t4)],
        "basic-and-x-adcp-auth": [("authorization", "Basic Zm9vOmJhcg=="), ("x-adcp-auth", w.t4)],
    }


PAIRS = [
    "revoked-then-valid",
    "valid-then-revoked",
    "same-key-twice",
    "bearer-and-revoked-x-adcp-auth",
    "bearer-and-other-buyer",
    "x-adcp-auth-then-bearer",
    "two-x-adcp-auth",
    "basic-and-x-adcp-auth",
]


def _rows(rt: Runtime) -> tuple[int, ...]:
    tables = ("adcp_checks", "entries", "reservations", "idempotency_keys")
    with rt.store.engine.connect() as conn:
        return tuple(conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one() for t in tables)


def _chain_ok(rt: Runtime) -> None:
    s = rt.settings
    doc = verify_chains(
        None,
        data_dir=s.data_dir,
        database_url=s.resolved_database_url(),
        key_file=s.key_file,
        no_signatures=False,
        check_log=False,
    ).document
    assert doc["ok"] is True, doc


def _mcp(w: World, arguments: Any, headers: list[tuple[str, str]]) -> Any:
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    call["params"] = {"name": "check_governance", "arguments": arguments}
    h = [
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
        *headers,
    ]
    return w.client.post("/mcp", json=call, headers=h)


def _refused(r: Any) -> dict[str, Any]:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == 'Bearer realm="warden"'
    body = r.json()
    assert body["status"] == "failed"
    assert body["adcp_error"]["code"] == "AUTH_INVALID"
    assert body["errors"][0]["code"] == "AUTH_INVALID"
    assert "more than one credential was sent" in body["adcp_error"]["message"]
    return body


@pytest.mark.parametrize("pair", PAIRS)
def test_rest_refuses_more_than_one_key_and_changes_nothing(world: World, pair: str) -> None:
    w = world
    headers = _pairs(w)[pair]
    before = _rows(w.rt)
    r = w.client.post("/adcp/check_governance", json=intent(w.plan_id, 10), headers=headers)
    _refused(r)
    assert _rows(w.rt) == before
    _chain_ok(w.rt)
    # Each key alone is answered as before: buyer-4's check goes through.
    one = w.client.post(
        "/adcp/check_governance",
        json=intent(w.plan_id, 10),
        headers={"authorization": f"Bearer {w.t4}"},
    )
    assert one.status_code == 200 and one.json()["status"] == "completed", one.text
    assert _rows(w.rt) != before


@pytest.mark.parametrize("pair", PAIRS)
def test_mcp_refuses_more_than_one_key_and_changes_nothing(world: World, pair: str) -> None:
    w = world
    before = _rows(w.rt)
    body = _refused(_mcp(w, intent(w.plan_id, 10), _pairs(w)[pair]))
    assert body["context_id"] == "ctx_mcp"
    assert _rows(w.rt) == before
    _chain_ok(w.rt)
    one = _mcp(w, intent(w.plan_id, 10), [("authorization", f"Bearer {w.t4}")])
    assert one.status_code == 200
    assert one.json()["result"]["structuredContent"]["status"] == "completed", one.text


def test_one_key_in_both_carriers_and_empty_lines_are_one_credential(world: World) -> None:
    """The AdCP SDK's client sends every key as ``Authorization: Bearer T`` and
    ``x-adcp-auth: T``: one key, accepted (the official runner's discovery depends on
    it). An empty ``x-adcp-auth`` (or ``Authorization``) carries nothing."""
    w = world
    for headers in (
        [("authorization", f"Bearer {w.t4}"), ("x-adcp-auth", w.t4)],
        [("x-adcp-auth", f" {w.t4}"), ("authorization", f"bearer  {w.t4}")],
        [("authorization", f"Bearer {w.t4}"), ("x-adcp-auth", "")],
        [("authorization", ""), ("x-adcp-auth", w.t4)],
    ):
        r = w.client.post("/adcp/get_adcp_capabilities", json={}, headers=headers)
        assert r.status_code == 200, r.text


def test_an_auth_failure_echoes_the_context_object(world: World) -> None:
    """The reviewer's case: a bad key with ``context`` and ``context_id`` answers with
    both, ``context`` byte for byte (as a schema error with the same body does)."""
    w = world
    raw = b'{"plan_ids":["x"],"context":{"k":1, "n":1.50},"context_id":"mine"}'
    for token in ("bad", w.rev):
        r = w.client.post(
            "/adcp/get_plan_audit_logs",
            content=raw,
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        assert r.status_code == 401, r.text
        body = r.json()
        assert body["adcp_error"]["code"] == "AUTH_INVALID"
        assert body["context_id"] == "mine" and body["context"] == {"k": 1, "n": 1.5}
        assert b'"context":{"k":1, "n":1.50}' in r.content  # the request's own text
    # Two keys, no key at all: the same echo.
    two = [("authorization", f"Bearer {w.t4}"), ("x-adcp-auth", w.t5)]
    r = w.client.post("/adcp/get_plan_audit_logs", content=raw, headers=two)
    assert _refused(r)["context"] == {"k": 1, "n": 1.5}
    r = w.client.post("/adcp/get_plan_audit_logs", content=raw)
    assert r.json()["adcp_error"]["code"] == "AUTH_MISSING" and r.json()["context"] == {
        "k": 1,
        "n": 1.5,
    }
    # A context that is not an object is not echoed (core/context.json), nor one in a
    # body that is not strict JSON (duplicate keys: which context would be echoed?).
    for other in (
        b'{"plan_ids":["x"],"context":"s","context_id":"mine"}',
        b'{"plan_ids":["x"],"context":{"k":1},"context":{"k":2},"context_id":"mine"}',
    ):
        r = w.client.post(
            "/adcp/get_plan_audit_logs", content=other, headers={"authorization": "Bearer bad"}
        )
        assert r.status_code == 401 and "context" not in r.json(), r.text


def test_mcp_auth_failure_echoes_the_context_object(world: World) -> None:
    w = world
    args = {"plan_ids": ["x"], "context": {"k": 1}, "context_id": "mine"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    call["params"] = {"name": "get_plan_audit_logs", "arguments": args}
    for headers in (
        [("authorization", "Bearer bad")],
        [("authorization", f"Bearer {w.t4}"), ("authorization", f"Bearer {w.t5}")],
    ):
        r = w.client.post(
            "/mcp",
            json=call,
            headers=[("accept", "application/json, text/event-stream"), *headers],
        )
        assert r.status_code == 401, r.text
        body = r.json()
        assert body["adcp_error"]["code"] == "AUTH_INVALID"
        assert body["context_id"] == "mine" and body["context"] == {"k": 1}


def _signed(w: World, key: Ed25519PrivateKey, body: dict[str, Any]) -> tuple[bytes, list[Any]]:
    raw = json.dumps(body, separators=(",", ":")).encode()
    h = (("Content-Type", "application/json"),)
    url = w.rt.settings.resolved_public_url() + "/adcp/check_governance"
    req = HttpRequest("POST", url, h, raw)
    signed = sign_request(req, key, KID, alg="ed25519", tag=REQUEST_TAG, created=int(time.time()))
    return raw, list(signed.headers)


def test_a_signature_beside_one_key_is_kept_beside_two_refused(world: World) -> None:
    """Decision 563 lets one API key of the signer's principal ride beside an RFC 9421
    signature; two keys beside it are refused before the signature is checked, so the
    same signed request (same nonce) is accepted afterwards with one key."""
    w = world
    key = Ed25519PrivateKey.generate()
    AgentSigningKeys(w.rt.store).add("buyer-4", public_jwk(key, KID))
    raw, headers = _signed(w, key, intent(w.plan_id, 10))
    before = _rows(w.rt)
    for extra in (
        [("authorization", f"Bearer {w.t4}"), ("x-adcp-auth", w.rev)],
        [("authorization", f"Bearer {w.t4}"), ("authorization", f"Bearer {w.t4}")],
        [("x-adcp-auth", w.t4), ("x-adcp-auth", w.t4)],
    ):
        r = w.client.post("/adcp/check_governance", content=raw, headers=[*headers, *extra])
        _refused(r)
    assert _rows(w.rt) == before
    _chain_ok(w.rt)
    # The nonce was not spent: the same signed bytes, one key beside them (in both of
    # AdCP's carriers, as the SDK sends it), are accepted.
    one = [*headers, ("authorization", f"Bearer {w.t4}"), ("x-adcp-auth", w.t4)]
    r = w.client.post("/adcp/check_governance", content=raw, headers=one)
    assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    # And the signature alone still needs no key at all.
    raw, headers = _signed(w, key, intent(w.plan_id, 10))
    r = w.client.post("/adcp/check_governance", content=raw, headers=headers)
    assert r.status_code == 200, r.text
