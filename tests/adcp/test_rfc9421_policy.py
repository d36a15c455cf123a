"""The request-signing policy on Warden's AdCP wire, in-process runtimes served over
loopback HTTP: each ``adcp_request_signing`` mode, the capability block, webhook
credentials that must be signed, a signature and an API key naming different callers,
the per-key replay cap, and the same rules over ``/mcp``; and every negative
request-signing vector POSTed byte for byte to the wire, answered in AdCP's envelope.

Requests are signed with :mod:`warden.adcp.rfc9421.sign` for the URL Warden is
configured to be reachable at (``public_url``), which is what a signer addresses."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from adcp_helpers import Live, live, plan
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rfc9421_vectors import REQUEST_DIR, jwks_for, keys_of, load, profile_for, vector_files

from warden.adcp.rfc9421.keys import public_jwk
from warden.adcp.rfc9421.sign import sign_request
from warden.adcp.rfc9421.verify import REQUEST_TAG, HttpRequest
from warden.identity.signing_keys import AgentSigningKeys
from warden.runtime import Runtime
from warden.store.rfc9421_sql import SqlNonces, SqlSigningKeys

KID = "buyer-agent-key"


def setup(srv: Live) -> Ed25519PrivateKey:
    """buyer-agent (the live server's agent) gets a signing key."""
    key = Ed25519PrivateKey.generate()
    AgentSigningKeys(srv.rt.store).add("buyer-agent", public_jwk(key, KID))
    return key


def post(
    srv: Live,
    task: str,
    body: dict[str, Any],
    key: Ed25519PrivateKey | None = None,
    *,
    path: str | None = None,
    **headers: str,
) -> httpx.Response:
    """POST ``body`` to ``/adcp/<task>`` (or ``path``), signed with ``key`` if given."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    target = path or f"/adcp/{task}"
    h: list[tuple[str, str]] = [("Content-Type", "application/json")]
    if key is not None:
        req = HttpRequest("POST", srv.rt.settings.resolved_public_url() + target, tuple(h), raw)
        h = list(
            sign_request(
                req, key, KID, alg="ed25519", tag=REQUEST_TAG, created=int(time.time())
            ).headers
        )
    return srv.http.post(target, content=raw, headers=[*h, *headers.items()])


def code(r: httpx.Response) -> str:
    return str(r.json()["adcp_error"]["code"])


def sync(plan_id: str = "p1", **extra: Any) -> dict[str, Any]:
    return {"plans": [plan(plan_id)], "idempotency_key": str(uuid.uuid4()), **extra}


def test_required_mode(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(adcp_request_signing="required")
    with live(rt) as srv:
        key = setup(srv)
        auth = {"authorization": f"Bearer {srv.agent_token}"}
        caps = post(srv, "get_adcp_capabilities", {}, **auth).json()["request_signing"]
        assert caps["supported"] is True and caps["covers_content_digest"] == "required"
        assert "get_adcp_capabilities" in caps["supported_for"]
        assert (
            "sync_plans" in caps["required_for"]
            and "get_adcp_capabilities" not in caps["required_for"]
        )
        # Unsigned and no valid key: request_signature_required (not AUTH_MISSING).
        r = post(srv, "sync_plans", sync())
        assert r.status_code == 401 and code(r) == "request_signature_required"
        assert r.headers["www-authenticate"] == 'Signature error="request_signature_required"'
        r = post(srv, "sync_plans", sync(), authorization="Bearer wdn_bogus_token")
        assert code(r) == "request_signature_required"
        # Discovery stays open to an API key alone; so does any task (AdCP required_for
        # accepts a valid fallback credential).
        assert post(srv, "sync_plans", sync(), **auth).status_code == 200
        # Signed: accepted with no key at all.
        assert post(srv, "sync_plans", sync("p2"), key).status_code == 200
        # Webhook credentials never travel unsigned, even with a valid key.
        push = {
            "url": "https://buyer.example/hook",
            "authentication": {"schemes": ["HMAC-SHA256"], "credentials": "x" * 32},
        }
        r = post(srv, "sync_plans", sync("p3", push_notification_config=push), **auth)
        assert code(r) == "request_signature_required"


def test_supported_mode_never_downgrades_and_checks_who(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(adcp_signing_replay_cap=3)
    with live(rt) as srv:
        key = setup(srv)
        auth = {"authorization": f"Bearer {srv.agent_token}"}
        # Unsigned without a key: the bearer challenge, as before issue 21.
        r = post(srv, "sync_plans", sync())
        assert code(r) == "AUTH_MISSING" and r.headers["www-authenticate"].startswith("Bearer")
        # A bad signature is refused even though the API key is good.
        bad = Ed25519PrivateKey.generate()
        r = post(srv, "sync_plans", sync(), bad, **auth)
        assert r.status_code == 401 and code(r) == "request_signature_invalid"
        assert r.json()["adcp_error"]["details"] == {"step": 10}
        # The signer and the key's holder must be the same principal.
        other = srv.key("someone-else", "agent")
        r = post(srv, "sync_plans", sync(), key, authorization=f"Bearer {other}")
        assert r.status_code == 401 and code(r) == "AUTH_INVALID"
        assert post(srv, "sync_plans", sync(), key, **auth).status_code == 200
        # A body covered by no digest is refused under the 3.2 profile (no argument
        # substitution): sign only the request line.
        raw = json.dumps(sync(), separators=(",", ":")).encode()
        req = HttpRequest(
            "POST",
            srv.rt.settings.resolved_public_url() + "/adcp/sync_plans",
            (("Content-Type", "application/json"),),
            raw,
        )
        thin = sign_request(
            req, key, KID, alg="ed25519", tag=REQUEST_TAG, created=int(time.time()),
            covered=("@method", "@target-uri", "@authority", "content-type"),
        )  # fmt: skip
        r = srv.http.post("/adcp/sync_plans", content=raw, headers=list(thin.headers))
        assert code(r) == "request_signature_components_incomplete"
        # The Host header does not choose the authority: Warden's public URL does.
        r = post(srv, "sync_plans", sync(), key, host="evil.example")
        assert r.status_code == 200
        # Three live nonces (the mismatched call spent one too): the cap of 3 is reached,
        # and the fourth is refused before any cryptography.
        r = post(srv, "sync_plans", sync(), key)
        assert code(r) == "request_signature_rate_abuse"
        assert r.json()["adcp_error"]["recovery"] == "transient"


def test_warn_mode(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(adcp_request_signing="warn")
    with live(rt) as srv:
        key = setup(srv)
        auth = {"authorization": f"Bearer {srv.agent_token}"}
        bad = Ed25519PrivateKey.generate()
        assert post(srv, "sync_plans", sync(), bad, **auth).status_code == 200  # warned
        r = post(srv, "sync_plans", sync(), bad)
        assert code(r) == "AUTH_MISSING"  # no fallback: unauthenticated
        assert post(srv, "sync_plans", sync(), key).status_code == 200
        # A malformed header pair is refused even in warn mode (downgrade protection).
        r = post(srv, "sync_plans", sync(), None, signature="sig1=:AAAA:", **auth)
        assert code(r) == "request_signature_header_malformed"
        caps = post(srv, "get_adcp_capabilities", {}, **auth).json()["request_signing"]
        assert "sync_plans" in caps["warn_for"]


def test_off_mode_reads_no_signature(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(adcp_request_signing="off")
    with live(rt) as srv:
        auth = {"authorization": f"Bearer {srv.agent_token}"}
        caps = post(srv, "get_adcp_capabilities", {}, **auth).json()
        assert "request_signing" not in caps
        garbage = {"signature-input": "nonsense", "signature": "sig1=:AAAA:"}
        assert post(srv, "sync_plans", sync(), **auth, **garbage).status_code == 200
        key = Ed25519PrivateKey.generate()
        assert code(post(srv, "sync_plans", sync(), key)) == "AUTH_MISSING"


def test_mcp_follows_the_same_rules(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(adcp_request_signing="required")
    with live(rt) as srv:
        key = setup(srv)
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "sync_plans", "arguments": sync("via-mcp")},
        }
        accept = {"accept": "application/json, text/event-stream"}
        r = post(srv, "", call, path="/mcp", **accept)
        assert r.status_code == 401 and code(r) == "request_signature_required"
        r = post(srv, "", call, key, path="/mcp", **accept)
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        assert not result.get("isError"), result
        assert result["structuredContent"]["plans"][0]["plan_id"] == "via-mcp"
        # initialize is no task: an API key is enough, as before.
        init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        r = post(srv, "", init, path="/mcp", authorization=f"Bearer {srv.agent_token}", **accept)
        assert r.status_code == 200


# -- the negative request vectors over the wire ---------------------------------------

NEGATIVE = [p for p in vector_files(REQUEST_DIR) if p.parent.name == "negative"]
#: Vectors the wire cannot be sent: 026's authority is a U-label, but Warden checks
#: signatures against its own public URL, never the request's host; 028 targets the
#: ``protocol_methods_required_for`` bucket, which Warden does not advertise (the runner
#: skips it then). The verifier refuses both with their codes in test_rfc9421_vectors.
NOT_ON_THE_WIRE = {"026-non-ascii-host.json", "028-unsigned-protocol-method-required.json"}


@pytest.fixture(scope="module")
def seller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A Warden reachable as https://seller.example.com (the vectors' URL) with every
    key the vectors name registered for one agent, test-revoked-2026 revoked."""
    from conftest import DEFAULT_POLICY, write_key

    from warden.settings import Settings

    data = tmp_path_factory.mktemp("seller")
    key = write_key(data / "ikm.key")
    rt = Runtime.start(
        Settings(
            data_dir=data,
            policy=DEFAULT_POLICY,
            key_file=key,
            public_url="https://seller.example.com",
        )
    )
    try:
        from conftest import ensure_agent

        ensure_agent(rt, "vector-agent")
        jwks = {**jwks_for(REQUEST_DIR / "x", {"jwks_ref": list(keys_of(REQUEST_DIR))})}
        jwks.update(
            jwks_for(NEGATIVE[0], load(REQUEST_DIR / "negative/025-jwk-alg-crv-mismatch.json"))
        )
        with rt.store.transaction() as tx:
            table = SqlSigningKeys(tx.cursor, rt.store._q)
            for kid, jwk in jwks.items():  # as presented, malformed ones included
                table.insert(kid, "vector-agent", json.dumps(jwk), "2026-01-01T00:00:00Z")
            table.revoke("test-revoked-2026", "2026-01-02T00:00:00Z")
        with live(rt) as srv:
            yield srv
    finally:
        rt.close()


@pytest.mark.parametrize(
    "path", [p for p in NEGATIVE if p.name not in NOT_ON_THE_WIRE], ids=lambda p: p.name
)
def test_negative_vector_over_the_wire(seller: Live, path: Path) -> None:
    """Each negative request vector, its exact bytes POSTed to Warden's AdCP wire at its
    ``reference_now``: HTTP 401, ``WWW-Authenticate: Signature error="<code>"``, and the
    code in ``errors[]`` and ``adcp_error``."""
    vec = load(path)
    now = int(vec["reference_now"])
    signing = seller.rt.adcp_signing
    assert signing is not None
    cap = vec.get("verifier_capability") or {}
    op = vec["request"]["url"].rsplit("/", 1)[-1]
    signing.profile = profile_for(path, vec)
    signing.mode = "required" if op in (cap.get("required_for") or []) else "supported"
    signing._clock = lambda: now  # the vector's wall clock
    state = vec.get("test_harness_state") or {}
    with seller.rt.store.transaction() as tx:
        nonces = SqlNonces(tx.cursor, seller.rt.store._q)
        tx.cursor.execute("DELETE FROM adcp_signature_nonces")
        for e in state.get("replay_cache_entries", []):
            assert nonces.remember(e["keyid"], e["nonce"], now + 360, now)
        capped = (state.get("replay_cache_per_keyid_cap_hit") or {}).get("keyid")
        for i in range(3 if capped else 0):
            assert nonces.remember(capped, f"placeholder-{i}", now + 300, now)
    signing.replay_cap = 3 if capped else 1_000_000
    try:
        r = seller.http.post(
            "/adcp/" + op,
            content=vec["request"]["body"].encode(),
            headers=list(vec["request"]["headers"].items()),
        )
    finally:
        signing._clock = time.time
        signing.replay_cap = 1_000_000
    code = vec["expected_outcome"]["error_code"]
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == f'Signature error="{code}"'
    body = r.json()
    assert body["status"] == "failed"
    assert body["adcp_error"]["code"] == code and body["errors"] == [body["adcp_error"]]
