"""Black-box probes over real HTTP against a `warden serve` subprocess.

* REF-PY's ten external probes (specs/acs.md §17, ``tests/test_external_probes.py``), in order
  on one server; every signed response's signature is checked.
* The probityai wire probes (``acs_wire_probes.py``) that Warden's behaviour pins:
  D1 signatures, D2c replay across a restart, D3 skew, D4 the signed advancing chain_hash,
  D5 ping without a handshake, D6 negotiation refusals, D8 wrapped MCP ``rm -rf /``.
"""

from __future__ import annotations

import copy
from typing import Any

from conftest import Server, assert_valid_response, start_server

from warden.wire.acs.client import AcsClient, verify_response
from warden.wire.acs.signing import sign_request

from ._helpers import (
    KEYS,
    PROBE_METHODS,
    assert_error,
    assert_signed,
    assert_unsigned,
    body,
    hello_payload,
    inner,
    rfc3339,
    signed_envelope,
    tool_payload,
)

MCP_VERSION = "2025-06-18"


def http_client(server: Server, **kw: Any) -> AcsClient:
    """An envelope builder for ``server`` whose transport is ``Server.post`` (no long-lived
    httpx client is left open); the tests send exact bytes with :func:`post`."""
    return server.client(**kw)


def post(server: Server, raw: bytes, session_id: str | None, *, signed: bool) -> dict[str, Any]:
    """POST raw bytes; validate the response and its signed-ness."""
    response = server.post(raw)
    assert_valid_response(response)
    if signed:
        assert session_id is not None
        assert_signed(response, session_id)
    else:
        assert_unsigned(response)
    return response


def send(
    server: Server, client: AcsClient, method: str, payload: dict[str, Any], **kw: Any
) -> tuple[bytes, dict[str, Any]]:
    env = client.envelope(method, payload, **kw)
    raw = body(env)
    response = post(server, raw, client.session_id, signed=True)
    assert response["id"] == env["id"]
    return raw, response


def allowed(response: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = response["result"]
    assert result["decision"] == "allow", result
    return result


def test_ref_py_external_probes(server: Server) -> None:
    client = http_client(server)
    sid = client.session_id

    # (1) jsonrpc "1.0" → -32600, unsigned.
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    env["jsonrpc"] = "1.0"
    assert_error(post(server, body(env), sid, signed=False), -32600)

    # (2) a step before any handshake → -32003 (signed: the request was authenticated).
    _, resp = send(server, client, "steps/toolCallRequest", tool_payload("ls"))
    assert assert_error(resp, -32003)["data"]["method"] == "steps/toolCallRequest"

    # (3) a stdio-only hello → -32000.
    _, resp = send(server, client, "handshake/hello", hello_payload(transports=("stdio",)))
    assert assert_error(resp, -32000)["data"]["reason"] == "no_common_transport"

    # (4) a hello → ServerHello whose methods_evaluated equals the offered methods.
    _, resp = send(server, client, "handshake/hello", hello_payload(PROBE_METHODS))
    hello = resp["result"]
    assert "decision" not in hello
    assert hello["methods_evaluated"] == PROBE_METHODS
    assert hello["negotiated_version"] == "0.1.0"
    assert hello["selected_transport"] == "http"

    # (5) a benign toolCallRequest → allow, with a published chain_hash.
    benign, resp = send(server, client, "steps/toolCallRequest", tool_payload("ls", path="."))
    assert len(allowed(resp)["chain_hash"]) == 64

    # (6) its replay (same bytes) → -32005.
    assert_error(post(server, benign, sid, signed=True), -32005)

    # (7) a payload lacking `arguments` → -32602.
    bad, resp = send(server, client, "steps/toolCallRequest", {"tool": {"name": "ls"}})
    err = assert_error(resp, -32602)
    assert err["data"]["pointer"] == "/params/payload"

    # (8) its replay → -32005.
    assert_error(post(server, bad, sid, signed=True), -32005)

    # (9) an unnegotiated steps/userMessage → -32003.
    message = {"content": [{"type": "text", "value": "hello"}]}
    unneg, resp = send(server, client, "steps/userMessage", message)
    assert assert_error(resp, -32003)["data"]["method"] == "steps/userMessage"

    # (10) its replay → -32005.
    assert_error(post(server, unneg, sid, signed=True), -32005)


def test_d1_signature_probes(server: Server) -> None:
    client = http_client(server)
    send(server, client, "handshake/hello", hello_payload())
    sid = client.session_id
    # D1a: no signature.
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    assert_error(post(server, body(env), sid, signed=False), -32004)
    # D1b: a signature that does not verify (one flipped bit of a genuine MAC).
    signed = sign_request(copy.deepcopy(env), client.key, client.key_id)
    value = bytearray(signed["params"]["signature"]["value"].encode())
    value[0] ^= 0x01
    signed["params"]["signature"]["value"] = value.decode()
    assert_error(post(server, body(signed), sid, signed=False), -32004)
    # D1c: a MAC computed without params.payload.
    partial = {**env, "params": {k: v for k, v in env["params"].items() if k != "payload"}}
    partial = sign_request(partial, client.key, client.key_id)
    partial["params"]["payload"] = env["params"]["payload"]
    assert_error(post(server, body(partial), sid, signed=False), -32004)
    # The genuine request (same request_id) is still accepted: forgeries burn nothing.
    genuine = sign_request(env, client.key, client.key_id)
    allowed(post(server, body(genuine), sid, signed=True))


def test_d2_replay_and_d2c_across_restart(server: Server) -> None:
    client = http_client(server)
    sid = client.session_id
    send(server, client, "handshake/hello", hello_payload())
    raw, resp = send(server, client, "steps/toolCallRequest", tool_payload("ls"))
    head = allowed(resp)["chain_hash"]
    # D2a: same bytes.
    assert_error(post(server, raw, sid, signed=True), -32005)
    # D2b: a nonce reused under a new request_id.
    nonce = "probe-nonce-0123456789"
    first = signed_envelope(client, "steps/toolCallRequest", tool_payload("ls"), nonce=nonce)
    last_head = allowed(post(server, body(first), sid, signed=True))["chain_hash"]
    again = signed_envelope(client, "steps/toolCallRequest", tool_payload("pwd"), nonce=nonce)
    assert_error(post(server, body(again), sid, signed=True), -32005)

    # D2c: restart the Guardian on the same data directory and resend the same bytes.
    server.stop()
    assert server.proc.poll() is not None
    restarted = start_server(server.data_dir)
    try:
        assert_error(post(restarted, raw, sid, signed=True), -32005)
        assert_error(post(restarted, body(again), sid, signed=True), -32005)
        # The session and its head survived: a step that names the pre-restart head is not a
        # chain_mismatch, and it chains a new head.
        fresh = http_client(restarted, session_id=sid)
        fresh.chain_hash = last_head
        _, resp = send(restarted, fresh, "steps/toolCallRequest", tool_payload("ls"))
        new_head = allowed(resp)["chain_hash"]
        assert new_head not in (head, last_head)
        # The handshake cannot be replayed or redone either.
        _, resp = send(restarted, fresh, "handshake/hello", hello_payload())
        assert assert_error(resp, -32000)["data"]["reason"] == "renegotiation_not_supported"
    finally:
        restarted.stop()


def test_d3_skew_window(server: Server) -> None:
    client = http_client(server)
    _, resp = send(server, client, "handshake/hello", hello_payload())
    assert resp["result"]["skew_window_ms"] == 300_000
    for offset_s in (3600, -3600):
        _, resp = send(
            server, client, "steps/toolCallRequest", tool_payload("ls"), timestamp=rfc3339(offset_s)
        )
        assert assert_error(resp, -32006)["data"]["skew_window_ms"] == 300_000
    _, resp = send(server, client, "steps/toolCallRequest", tool_payload("ls"))
    allowed(resp)


def test_d4_chain_hash_is_signed_and_advances(server: Server) -> None:
    client = http_client(server, track_chain=False)
    send(server, client, "handshake/hello", hello_payload())
    heads = []
    for name in ("ls", "pwd", "whoami"):
        _, resp = send(server, client, "steps/toolCallRequest", tool_payload(name))
        heads.append(allowed(resp)["chain_hash"])
        # The signature covers chain_hash: a rewritten head no longer verifies.
        forged = copy.deepcopy(resp)
        forged["result"]["chain_hash"] = "f" * 64
        assert not verify_response(forged, KEYS.key_for(client.session_id))
    assert len(set(heads)) == 3
    # Cross-check: a stale head in session_state is a signed, chained chain_mismatch deny.
    client.chain_hash, client.track_chain = heads[0], True
    _, resp = send(server, client, "steps/toolCallRequest", tool_payload("ls"))
    result = resp["result"]
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["chain_mismatch"]
    assert result["chain_hash"] not in heads
    # Sending the current head back is accepted.
    client.chain_hash = result["chain_hash"]
    _, resp = send(server, client, "steps/toolCallRequest", tool_payload("ls"))
    allowed(resp)


def test_d5_ping_without_handshake(server: Server) -> None:
    client = http_client(server)
    env = client.envelope("system/ping", {"echo": "d5"}, sign=False)
    resp = post(server, body(env), client.session_id, signed=False)
    result = allowed(resp)
    assert result["payload"]["status"] == "ok" and result["payload"]["echo"] == "d5"
    assert "chain_hash" not in result
    # A signed ping on another fresh session gets a signed allow.
    other = http_client(server)
    _, resp = send(server, other, "system/ping", {})
    assert "chain_hash" not in allowed(resp)


def test_d6_negotiation_refusals(server: Server) -> None:
    client = http_client(server)
    _, resp = send(server, client, "handshake/hello", hello_payload(versions=("9.0.0",)))
    assert assert_error(resp, -32001)["data"]["supported_versions"] == ["0.1.0"]
    _, resp = send(
        server, client, "handshake/hello", hello_payload(profiles=("acs-core", "acs-crypto"))
    )
    assert resp["result"]["profiles_accepted"] == ["acs-core"]
    _, resp = send(server, client, "agbom/snapshot", {})
    assert_error(resp, -32003)


def test_d8_wrapped_mcp_destructive_command_denied(server: Server) -> None:
    client = http_client(server)
    payload = hello_payload([*PROBE_METHODS, "protocols/MCP/tools/call"])
    payload["wrapped_protocols"] = [{"protocol": "MCP", "version": MCP_VERSION}]
    _, resp = send(server, client, "handshake/hello", payload)
    assert "protocols/MCP/tools/call" in resp["result"]["methods_evaluated"]

    def tools_call(command: str, mcp_id: int) -> dict[str, Any]:
        message = {
            "jsonrpc": "2.0",
            "id": mcp_id,
            "method": "tools/call",
            "params": {"name": "shell", "arguments": {"command": command}},
        }
        _, response = send(server, client, "protocols/MCP/tools/call", message)
        return response

    result = inner(tools_call("rm -rf /", 1))
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["destructive_shell_command_blocked"]
    assert len(result["chain_hash"]) == 64
    # Not a blanket deny: a harmless wrapped call is allowed.
    allowed(tools_call("ls -la", 2))
