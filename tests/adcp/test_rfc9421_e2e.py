"""AdCP RFC 9421 end to end over real HTTP on loopback, against `warden serve` processes.

Inbound: requests are signed by an independent RFC 9421 implementation
(``http-message-signatures``, which shares no code with Warden) with a key registered
through ``warden agents add-signing-key``. A signed request is accepted and
authenticates as the agent with no API key; the same request with one byte flipped is
refused with the checklist's code, in AdCP's envelope and ``WWW-Authenticate``; a replay
is refused, also after a restart (the nonce store is the database); a revoked key is
refused.

Outbound: an approval task's webhook reaches a loopback receiver signed under AdCP's
webhook profile and is verified by the same independent library with the key Warden
publishes at ``/.well-known/jwks.json``; a legacy subscriber gets HMAC and no 9421
headers.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from adcp_helpers import plan
from conftest import Server, asset, ensure_agent, start_server
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from http_message_signatures import HTTPMessageSigner, HTTPMessageVerifier, InvalidSignature
from http_message_signatures.algorithms import ED25519
from http_message_signatures.resolvers import HTTPSignatureKeyResolver

from warden.approvals.webhooks import verify as verify_hmac

SECRET = "cc237f7fe354609bb41360c6530a2deb7926f3cc55e91df3ff90e37202950b6c"
TAG = "adcp/request-signing/v1"
WEBHOOK_TAG = "adcp/webhook-signing/v1"
COVERED = ("@method", "@target-uri", "@authority", "content-type", "content-digest")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 that records every POST and answers 200."""

    port: int = 0
    requests: list[Received] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            rec.requests.append(Received(self.path, dict(self.headers.items()), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


class Keys(HTTPSignatureKeyResolver):
    def __init__(self, private: Ed25519PrivateKey | None, public: Ed25519PublicKey) -> None:
        self.private = private
        self.public = public

    def resolve_private_key(self, key_id: str) -> Any:
        return self.private

    def resolve_public_key(self, key_id: str) -> Any:
        return self.public


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(
    key: Ed25519PrivateKey, kid: str, url: str, body: dict[str, Any]
) -> tuple[dict[str, str], bytes]:
    """Headers and body of a POST signed by the independent library (AdCP 3.2 wire:
    RFC 8941 Base64, content-digest covered)."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    req = httpx.Request("POST", url, headers={"Content-Type": "application/json"}, content=raw)
    now = datetime.now(UTC)
    HTTPMessageSigner(signature_algorithm=ED25519, key_resolver=Keys(key, key.public_key())).sign(
        req,
        key_id=kid,
        created=now,
        expires=now + timedelta(seconds=300),
        nonce=b64url(uuid.uuid4().bytes),
        label="sig1",
        tag=TAG,
        covered_component_ids=COVERED,
        body=raw,
    )
    return dict(req.headers), raw


def warden(*args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "warden", *args, "--json"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def refused(r: httpx.Response, code: str) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == f'Signature error="{code}"'
    body = r.json()
    assert body["status"] == "failed"
    assert body["adcp_error"]["code"] == code and body["errors"][0]["code"] == code


def test_signed_requests_and_webhooks_over_http(tmp_path: Path, receiver: Receiver) -> None:
    """One server (two processes over its life) for both directions: a `warden serve`
    start is the slow part of this file."""
    data = tmp_path / "d"
    data.mkdir()
    hooks = _hooks_file(tmp_path, receiver.port)
    args = (asset("approvals/desk.yaml"), "--webhooks", str(hooks))
    srv = start_server(data, *args)
    try:
        _webhooks_verify_independently(srv, receiver)
        ensure_agent(data, "buyer-1")
        key = Ed25519PrivateKey.generate()
        raw_pub = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        jwk_file = tmp_path / "buyer.jwk"
        jwk_file.write_text(json.dumps({"kty": "OKP", "crv": "Ed25519", "x": b64url(raw_pub)}))
        added = warden(
            "agents", "add-signing-key", "buyer-1", "--key", str(jwk_file),
            "--kid", "buyer-1-2026", "--data-dir", str(data),
        )  # fmt: skip
        assert added["kid"] == "buyer-1-2026" and added["jwk"]["adcp_use"] == "request-signing"
        shown = warden("agents", "show", "buyer-1", "--data-dir", str(data))
        assert [k["kid"] for k in shown["signing_keys"]] == ["buyer-1-2026"]

        admin = (data / "api.token").read_text().strip()
        caps = httpx.post(
            srv.url + "/adcp/get_adcp_capabilities",
            json={},
            headers={"Authorization": f"Bearer {admin}"},
        ).json()
        assert caps["request_signing"]["supported"] is True
        assert caps["request_signing"]["covers_content_digest"] == "required"

        url = srv.url + "/adcp/sync_plans"
        request = {"plans": [plan("signed-plan")], "idempotency_key": str(uuid.uuid4())}
        headers, body = signed(key, "buyer-1-2026", url, request)
        assert "authorization" not in {h.lower() for h in headers}
        ok = httpx.post(url, content=body, headers=headers)
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] == "completed"

        # The plan is the signer's: a signed read as buyer-1 sees it, the admin key's
        # principal does not own it.
        logs_url = srv.url + "/adcp/get_plan_audit_logs"
        h2, b2 = signed(key, "buyer-1-2026", logs_url, {"plan_ids": ["signed-plan"]})
        mine = httpx.post(logs_url, content=b2, headers=h2).json()
        assert [p["plan_id"] for p in mine["plans"]] == ["signed-plan"]
        theirs = httpx.post(
            logs_url,
            json={"plan_ids": ["signed-plan"]},
            headers={"Authorization": f"Bearer {admin}"},
        ).json()
        assert theirs["plans"] == []

        # One flipped byte in the body: the signature still covers the old digest.
        flipped = bytearray(body)
        flipped[body.index(b"signed-plan")] ^= 0x01
        h3, _ = signed(key, "buyer-1-2026", url, request)
        refused(
            httpx.post(url, content=bytes(flipped), headers=h3),
            "request_signature_digest_mismatch",
        )
        # One flipped byte in the signature.
        h4, b4 = signed(key, "buyer-1-2026", url, request)
        sig = h4["signature"]
        i = sig.index(":") + 5
        h4["signature"] = sig[:i] + ("A" if sig[i] != "A" else "B") + sig[i + 1 :]
        refused(httpx.post(url, content=b4, headers=h4), "request_signature_invalid")

        # The accepted request again: a replay, also on a restarted process.
        refused(httpx.post(url, content=body, headers=headers), "request_signature_replayed")
        srv.stop()
        srv = start_server(data, *args)
        url = srv.url + "/adcp/sync_plans"
        # (the public URL moved with the port: re-sign for the new address, same nonce)
        replay_headers, replay_body = _resign_same_nonce(key, headers, url, body)
        refused(
            httpx.post(url, content=replay_body, headers=replay_headers),
            "request_signature_replayed",
        )

        # Over MCP too: a signed tools/call needs no API key.
        mcp = srv.url + "/mcp"
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_plan_audit_logs", "arguments": {"plan_ids": ["signed-plan"]}},
        }
        h5, b5 = signed(key, "buyer-1-2026", mcp, call)
        h5["accept"] = "application/json, text/event-stream"
        r5 = httpx.post(mcp, content=b5, headers=h5)
        assert r5.status_code == 200, r5.text
        result = r5.json()["result"]["structuredContent"]
        assert [p["plan_id"] for p in result["plans"]] == ["signed-plan"]
        h6, b6 = signed(key, "buyer-1-2026", mcp, call)
        h6["signature"] = h6["signature"].replace(":", ":AAAA", 1)[:-5] + ":"
        r6 = httpx.post(mcp, content=b6, headers=h6)
        assert r6.status_code == 401
        assert r6.headers["www-authenticate"].startswith('Signature error="request_signature_')

        # Unsigned and no key: the bearer challenge, as before.
        bare = httpx.post(url, json=request)
        assert bare.status_code == 401 and bare.json()["adcp_error"]["code"] == "AUTH_MISSING"

        # A revoked key is refused at once.
        warden("agents", "revoke-signing-key", "buyer-1-2026", "--data-dir", str(data))
        h7, b7 = signed(key, "buyer-1-2026", url, request)
        refused(httpx.post(url, content=b7, headers=h7), "request_signature_key_revoked")
    finally:
        srv.stop()


def _resign_same_nonce(
    key: Ed25519PrivateKey, headers: dict[str, str], url: str, body: bytes
) -> tuple[dict[str, str], bytes]:
    """The first request's nonce and window, signed again for ``url``."""
    nonce = re.search(r'nonce="([^"]+)"', headers["signature-input"])
    created = re.search(r"created=(\d+)", headers["signature-input"])
    assert nonce is not None and created is not None
    req = httpx.Request("POST", url, headers={"Content-Type": "application/json"}, content=body)
    at = datetime.fromtimestamp(int(created.group(1)), UTC)
    HTTPMessageSigner(signature_algorithm=ED25519, key_resolver=Keys(key, key.public_key())).sign(
        req,
        key_id="buyer-1-2026",
        created=at,
        expires=at + timedelta(seconds=300),
        nonce=nonce.group(1),
        label="sig1",
        tag=TAG,
        covered_component_ids=COVERED,
        body=body,
    )
    return dict(req.headers), body


def _legacy_to_sf_binary(value: str) -> str:
    """AdCP webhook-v1 writes the signature as unpadded Base64URL; RFC 8941 (what the
    independent library parses) wants padded standard Base64. Same bytes."""
    label, _, rest = value.partition("=")
    token = rest.strip(":")
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return f"{label}=:{base64.b64encode(raw).decode()}:"


def _hooks_file(tmp_path: Path, port: int) -> Path:
    """A modern (RFC 9421) and a legacy (HMAC) subscriber, both on the receiver."""
    hooks = tmp_path / "webhooks.yaml"
    hooks.write_text(
        "webhooks:\n"
        f"  - id: modern\n    url: http://127.0.0.1:{port}/hook\n"
        f"  - id: legacy\n    url: http://127.0.0.1:{port}/legacy\n"
        f"    signing: hmac-sha256\n    secret: {SECRET}\n"
        "allow_networks: [loopback]\n"
    )
    return hooks


def _webhooks_verify_independently(srv: Server, receiver: Receiver) -> None:
    """An approval task's "requested" webhook reaches both subscribers: the modern one
    signed under AdCP's webhook profile, verified by the independent library with the
    key from Warden's JWKS; the legacy one with HMAC only."""
    port = receiver.port
    agent = srv.client(agent_id="agent-7")
    agent.hello()
    agent.tool_call("delete_file", {"path": "/x"})  # held for approval: "requested"
    deadline = time.monotonic() + 20
    while len(receiver.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    got = {r.path: r for r in receiver.requests}
    assert set(got) == {"/hook", "/legacy"}

    jwks = httpx.get(srv.url + "/.well-known/jwks.json").json()
    (jwk,) = [k for k in jwks["keys"] if k.get("adcp_use") == "request-signing"]
    x = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
    public = Ed25519PublicKey.from_public_bytes(x)

    modern = got["/hook"]
    headers = {k.lower(): v for k, v in modern.headers.items()}
    assert "x-adcp-signature" not in headers
    assert f'keyid="{jwk["kid"]}"' in headers["signature-input"]
    assert f'tag="{WEBHOOK_TAG}"' in headers["signature-input"]
    headers["signature"] = _legacy_to_sf_binary(headers["signature"])
    verifier = HTTPMessageVerifier(signature_algorithm=ED25519, key_resolver=Keys(None, public))
    url = f"http://127.0.0.1:{port}/hook"
    message = httpx.Request("POST", url, headers=headers, content=modern.body)
    (result,) = verifier.verify(
        message, expect_tag=WEBHOOK_TAG, require_components=COVERED, body=modern.body
    )
    assert result.parameters["keyid"] == jwk["kid"]
    assert json.loads(modern.body)["status"] == "input-required"
    # A flipped byte in the body fails the independent digest check.
    tampered = bytearray(modern.body)
    tampered[5] ^= 0x01
    with pytest.raises(InvalidSignature):
        verifier.verify(
            httpx.Request("POST", url, headers=headers, content=bytes(tampered)),
            expect_tag=WEBHOOK_TAG,
            body=bytes(tampered),
        )

    legacy = got["/legacy"]
    lheaders = {k: v for k, v in legacy.headers.items()}
    assert not {"signature", "signature-input"} & {k.lower() for k in lheaders}
    assert verify_hmac(SECRET, lheaders, legacy.body, int(time.time())).ok
