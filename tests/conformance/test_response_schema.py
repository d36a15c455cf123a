"""Every response kind Warden emits, driven in process, against the seed response schema.

For each kind the test asserts the decision or error code, validates the envelope with the
independent python-jsonschema validator (``assert_valid_response``), checks signed-ness
(answers to authenticated requests carry a verifying signature, answers to unauthenticated
ones carry none) and checks that ``chain_hash`` is present exactly on the responses that wrote
a ContextEntry, equals the stored head, and advances.

-32603 (internal error) is not exercised: Warden answers it only from the outermost
``except Exception`` in ``AcsService.handle`` (an unexpected crash); engine and store failures
on an authenticated session become signed DENYs instead. No well-formed or malformed request
reaches it, and faking a crash would test the fake, not Warden.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from conftest import (
    TEST_IKM,
    agent_credential,
    assert_valid_response,
    asset,
    claiming,
    service_client,
)

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import SessionKeys
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.wire.acs.client import DEFAULT_METHODS, AcsClient
from warden.wire.acs.signing import sign_request

from ._helpers import (
    KEYS,
    assert_error,
    assert_signed,
    assert_unsigned,
    body,
    hello_payload,
    inner,
    new_id,
    rfc3339,
    signed_envelope,
    tool_payload,
)

USER_MESSAGE = {"content": [{"type": "text", "value": "hello"}]}
TURN_END = {"turn_id": "t1", "outcome": "completed"}


def _head(rt: Runtime, sid: str) -> tuple[int, str | None]:
    session = rt.store.load_session(sid)
    return (session.head_seq, session.head_hash) if session is not None else (-1, None)


def exchange(
    rt: Runtime,
    raw: bytes,
    sid: str | None,
    *,
    signed: bool,
    client: AcsClient | None = None,
) -> dict[str, Any]:
    """Send ``raw`` in process; validate, check signed-ness and the chain_hash/entry link."""
    before = _head(rt, sid) if sid else (-1, None)
    response = rt.acs.handle(raw)
    assert_valid_response(response)
    part = inner(response)
    if signed:
        assert sid is not None
        assert_signed(response, sid, client.key if client is not None else None)
    else:
        assert_unsigned(response)
    after = _head(rt, sid) if sid else (-1, None)
    if after[0] != before[0]:
        assert after[0] == before[0] + 1, "one request wrote more than one entry"
        assert part.get("chain_hash") == after[1], "chain_hash must be the new stored head"
        assert after[1] != before[1], "chain_hash must advance"
        if client is not None:
            client.chain_hash = part["chain_hash"]
    else:
        assert "chain_hash" not in part, "chain_hash on a response that wrote no entry"
    return response


def step(
    rt: Runtime, client: AcsClient, method: str, payload: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    env = client.envelope(method, payload, **kw)
    response = exchange(rt, body(env), client.session_id, signed=True, client=client)
    assert response["id"] == env["id"]
    if "result" in response and "decision" in response["result"]:
        assert response["result"]["request_id"] == env["params"]["request_id"]
    return response


def hello(rt: Runtime, client: AcsClient, **kw: Any) -> dict[str, Any]:
    return step(rt, client, "handshake/hello", hello_payload(**kw))


def session(rt: Runtime, **kw: Any) -> AcsClient:
    """A client with a completed handshake (all methods offered)."""
    client = service_client(rt, **kw)
    resp = step(rt, client, "handshake/hello", _full_hello())
    assert "negotiated_version" in resp["result"]
    return client


def _full_hello() -> dict[str, Any]:
    payload = hello_payload(list(DEFAULT_METHODS))
    payload["wrapped_protocols"] = [{"protocol": "MCP", "version": "2025-06-18"}]
    return payload


def decision(response: dict[str, Any], expected: str) -> dict[str, Any]:
    assert "result" in response, response
    result: dict[str, Any] = response["result"]
    assert result["type"] == "final"
    assert result["decision"] == expected, result
    if expected != "allow":
        assert result["reasoning"]
    return result


# -- ServerHello and ping ---------------------------------------------------------------------


def test_server_hello(runtime: Runtime) -> None:
    client = service_client(runtime)
    offered = ["steps/toolCallRequest", "steps/userMessage", "agbom/snapshot", "system/ping"]
    resp = hello(runtime, client, methods=offered, profiles=("acs-core", "acs-trace"))
    result = resp["result"]
    assert "decision" not in result and "type" not in result
    assert result["negotiated_version"] == "0.1.0"
    assert result["methods_evaluated"] == [
        "steps/toolCallRequest",
        "steps/userMessage",
        "system/ping",
    ]
    assert result["selected_transport"] == "http"
    # An HMAC session: HMAC-SHA256 first, then what an ACS-Crypto session could use.
    assert result["signature_algorithms_supported"] == [
        "HMAC-SHA256",
        "ML-DSA-65",
        "ML-DSA-44",
        "ML-DSA-87",
        "ECDSA-P256",
        "RSA-PSS-SHA256",
    ]
    assert result["skew_window_ms"] == 300_000
    assert result["timeout_config"]["default_ms"] >= 1
    assert result["on_decision_failure"] in ("proceed", "deny")
    assert result["policy_requires_provenance"] is False
    assert result["profiles_accepted"] == ["acs-core"]
    # The handshake binds a session but writes no ContextEntry.
    state = runtime.store.load_session(client.session_id)
    assert state is not None and state.head_seq == -1
    assert state.agent_id == client.agent_id and state.key_id == client.key_id


def test_ping_unsigned_without_session(runtime: Runtime) -> None:
    client = service_client(runtime)
    env = client.envelope("system/ping", {"echo": "are you there"}, sign=False)
    resp = exchange(runtime, body(env), client.session_id, signed=False)
    result = decision(resp, "allow")
    assert resp["id"] == env["id"]
    assert result["payload"]["status"] == "ok"
    assert result["payload"]["echo"] == "are you there"
    assert isinstance(result["payload"]["server_timestamp"], str)
    assert runtime.store.load_session(client.session_id) is None


def test_ping_signed_is_signed_and_never_chained(runtime: Runtime) -> None:
    client = session(runtime)
    step(runtime, client, "steps/toolCallRequest", tool_payload("ls"))
    head = _head(runtime, client.session_id)
    resp = step(runtime, client, "system/ping", {})
    result = decision(resp, "allow")
    assert "echo" not in result["payload"]
    assert _head(runtime, client.session_id) == head


def test_ping_with_a_bad_signature_is_still_allowed_unsigned(runtime: Runtime) -> None:
    client = service_client(runtime)
    env = client.envelope("system/ping", {"echo": "x"})
    env["params"]["signature"]["value"] = base64.b64encode(b"\0" * 32).decode()
    resp = exchange(runtime, body(env), client.session_id, signed=False)
    decision(resp, "allow")


def test_malformed_ping_gets_a_plain_jsonrpc_error(runtime: Runtime) -> None:
    client = service_client(runtime)
    env = client.envelope("system/ping", {"echo": 5}, sign=False)
    resp = exchange(runtime, body(env), client.session_id, signed=False)
    err = assert_error(resp, -32602)
    assert err["data"]["pointer"] == "/params/payload/echo"


def test_malformed_signed_ping_error_is_signed(runtime: Runtime) -> None:
    """An authenticated request gets a signed answer, errors included (specs/acs.md §11)."""
    client = service_client(runtime)
    env = client.envelope("system/ping", {"echo": ["not", "a", "string"]})
    resp = exchange(runtime, body(env), client.session_id, signed=True)
    assert_error(resp, -32602)


# -- decisions -----------------------------------------------------------------------------------


def test_allow(runtime: Runtime) -> None:
    client = session(runtime)
    result = decision(step(runtime, client, "steps/toolCallRequest", tool_payload("ls")), "allow")
    assert [r["rule_id"] for r in result["policy_references"]] == ["tool-calls"]
    assert result["metadata"]["evaluator"] == "deterministic"


def test_allow_with_warn(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(asset("conformance/warn.yaml"))
    client = session(rt)
    resp = step(rt, client, "steps/toolCallRequest", tool_payload("curl", url="https://x.test"))
    result = decision(resp, "allow")
    assert result["reason_codes"] == ["egress_flagged", "policy_warning"]
    assert "warn-on-curl" in [r["rule_id"] for r in result["policy_references"]]
    # A tool without the warn rule is a plain allow.
    plain = decision(step(rt, client, "steps/toolCallRequest", tool_payload("ls")), "allow")
    assert "reason_codes" not in plain


def test_deny(runtime: Runtime) -> None:
    client = session(runtime)
    resp = step(runtime, client, "steps/toolCallRequest", tool_payload("Bash", command="rm -rf /"))
    result = decision(resp, "deny")
    assert result["reason_codes"] == ["destructive_shell_command_blocked"]
    assert "destructive-shell" in [r["rule_id"] for r in result["policy_references"]]


def test_modify(runtime: Runtime) -> None:
    client = session(runtime)
    payload = tool_payload("login", user="ann", password="hunter2")
    result = decision(step(runtime, client, "steps/toolCallRequest", payload), "modify")
    assert result["modifications"] == {"redactions": [{"path": "/arguments/password/value"}]}
    assert result["reason_codes"] == ["redaction_applied"]


def test_ask(runtime: Runtime) -> None:
    client = session(runtime)
    payload = tool_payload("delete_file", path="/tmp/x")
    result = decision(step(runtime, client, "steps/toolCallRequest", payload), "ask")
    details = result["ask_details"]
    assert details["approver"] == {"type": "human", "id": "operators"}
    assert details["question"] and details["timeout_seconds"] == 900
    assert details["timeout_disposition"] == "deny"
    assert result["reason_codes"] == ["destructive_action_requires_approval", "approval_pending"]
    assert details["task_id"].startswith("task_") and details["task_url"].endswith(
        details["task_id"]
    )


def test_defer(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(asset("conformance/defer.yaml"))
    client = session(rt)
    resp = step(rt, client, "steps/toolCallRequest", tool_payload("deploy", target="prod"))
    result = decision(resp, "defer")
    assert result["defer_details"] == {
        "reason": "insufficient_context",
        "resolution_method": "additional_context",
        "resolution_timeout_ms": 60000,
        "timeout_decision": "deny",
        "required_context": ["environment"],
    }


def test_evaluation_error_fails_closed(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(asset("conformance/eval-error.yaml"))
    client = session(rt)
    # The condition works when the key is there ...
    ok = step(rt, client, "steps/toolCallRequest", tool_payload("deploy", target="dev"))
    decision(ok, "allow")
    # ... and a missing key is an evaluation error: a signed, chained deny.
    resp = step(rt, client, "steps/toolCallRequest", tool_payload("deploy"))
    result = decision(resp, "deny")
    assert result["reason_codes"] == ["evaluation_failed"]
    assert "chain_hash" in result
    # The failure detail goes to the ledger, never to the wire.
    assert "KeyError" not in json.dumps(resp)
    entries = [r for r in rt.store.iter_records(client.session_id) if r["kind"] == "entry"]
    assert entries[-1]["entry"]["verdict"]["reason_codes"] == ["evaluation_failed"]
    assert "target" in entries[-1]["entry"]["failure"]


def test_disposition_substitution(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(asset("conformance/substitution.yaml"))
    client = session(rt)
    # turnEnd permits allow only: the policy's deny becomes allow.
    result = decision(step(rt, client, "steps/turnEnd", TURN_END, turn_id="t1"), "allow")
    assert "disposition_not_permitted" in result["reason_codes"]
    assert result["policy_data"]["substituted_from"] == "deny"
    # userMessage does not permit ask: it becomes deny, without ask_details.
    result = decision(step(rt, client, "steps/userMessage", USER_MESSAGE), "deny")
    assert "disposition_not_permitted" in result["reason_codes"]
    assert result["policy_data"]["substituted_from"] == "ask"
    assert "ask_details" not in result


def test_chain_mismatch(runtime: Runtime) -> None:
    client = session(runtime)
    first = step(runtime, client, "steps/toolCallRequest", tool_payload("ls"))
    good_head = first["result"]["chain_hash"]
    client.chain_hash = "ab" * 32
    result = decision(step(runtime, client, "steps/toolCallRequest", tool_payload("ls")), "deny")
    assert result["reason_codes"] == ["chain_mismatch"]
    assert result["policy_data"]["chain"]["guardian_head"] == good_head
    assert result["chain_hash"] != good_head
    # With the published head sent back, the session continues.
    assert client.chain_hash == result["chain_hash"]
    decision(step(runtime, client, "steps/toolCallRequest", tool_payload("ls")), "allow")


@pytest.mark.parametrize(
    ("signer", "claimed", "reason"),
    [
        # Another registered agent's key on this session, claiming this session's agent:
        # the session reads as a missing one (-32003, decision 1005).
        ("another-agent", "observed-agent", None),
        # This session's key, claiming another agent id.
        ("observed-agent", "impostor", "agent_id_not_bound"),
    ],
)
def test_binding_denies(runtime: Runtime, signer: str, claimed: str, reason: str | None) -> None:
    client = session(runtime)
    step(runtime, client, "steps/toolCallRequest", tool_payload("ls"))
    other = AcsClient.for_agent(
        runtime.acs.handle,
        agent_credential(runtime, signer),
        agent_id=claimed,
        session_id=client.session_id,
    )
    env = other.envelope("steps/toolCallRequest", tool_payload("ls"))
    resp = exchange(runtime, body(env), client.session_id, signed=True, client=other)
    if reason is None:
        assert_error(resp, -32003)
        # Nothing was recorded, as for a missing session: the same request, the same answer.
        again = exchange(runtime, body(env), client.session_id, signed=True, client=other)
        assert again == resp
        return
    result = decision(resp, "deny")
    assert result["reason_codes"] == [reason]
    assert "chain_hash" not in result
    # The refused request's id was recorded on arrival: its replay is -32005.
    again = exchange(runtime, body(env), client.session_id, signed=True, client=other)
    assert_error(again, -32005)


def test_session_closed(runtime: Runtime) -> None:
    client = session(runtime)
    closing = client.envelope("steps/sessionEnd", {"reason": "completed"})
    decision(exchange(runtime, body(closing), client.session_id, signed=True), "allow")
    state = runtime.store.load_session(client.session_id)
    assert state is not None and state.closed
    result = decision(step(runtime, client, "steps/toolCallRequest", tool_payload("ls")), "deny")
    assert result["reason_codes"] == ["session_closed"]
    assert "chain_hash" not in result
    # Replay history outlives sessionEnd: its own replay is -32005, not a session_closed deny.
    assert_error(exchange(runtime, body(closing), client.session_id, signed=True), -32005)


# -- JSON-RPC errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"jsonrpc":"2.0","id":1,"x":NaN}', b'{"id":1,"id":2}', b'{"a":"\xff"}', b""],
    ids=["truncated", "nan", "duplicate-key", "bad-utf8", "empty"],
)
def test_parse_error(runtime: Runtime, raw: bytes) -> None:
    resp = exchange(runtime, raw, None, signed=False)
    assert_error(resp, -32700)
    assert resp["id"] is None


def test_batch_is_invalid_request(runtime: Runtime) -> None:
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"))
    resp = exchange(runtime, body([env]), client.session_id, signed=False)
    err = assert_error(resp, -32600)
    assert resp["id"] is None
    assert err["data"]["reason"] == "batch_unsupported"
    assert _head(runtime, client.session_id)[0] == -1


def test_invalid_envelope(runtime: Runtime) -> None:
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    env["jsonrpc"] = "1.0"
    resp = exchange(runtime, body(env), client.session_id, signed=False)
    err = assert_error(resp, -32600)
    assert resp["id"] == env["id"]
    assert err["data"]["pointer"] == "/jsonrpc"
    # An unknown top-level member is refused before the (valid) signature is even looked at.
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    env["extra"] = True
    resp = exchange(
        runtime, body(sign_request(env, client.key, client.key_id)), client.session_id, signed=False
    )
    assert_error(resp, -32600)
    # A request id of null (or an object) is not a request; the answer's id is null.
    for bad_id in (None, {"n": 1}, True):
        env = client.envelope("steps/toolCallRequest", tool_payload("ls"))
        env["id"] = bad_id
        resp = exchange(runtime, body(env), client.session_id, signed=False)
        assert_error(resp, -32600)
        assert resp["id"] is None
    # A method outside the ACS namespaces fails the envelope schema.
    env = client.envelope("tools/call", {})
    assert_error(exchange(runtime, body(env), client.session_id, signed=False), -32600)
    # No write happened for any of these.
    assert _head(runtime, client.session_id)[0] == -1


@pytest.mark.parametrize("literal", ["1e400", str(2**60)])
def test_jcs_domain_is_invalid_request(runtime: Runtime, literal: str) -> None:
    client = session(runtime)
    env = client.envelope(
        "steps/toolCallRequest", tool_payload("calc", n="PLACEHOLDER"), sign=False
    )
    raw = body(env).replace(b'"PLACEHOLDER"', literal.encode())
    resp = exchange(runtime, raw, client.session_id, signed=False)
    err = assert_error(resp, -32600)
    assert err["data"]["reason"] == "jcs_domain"
    assert resp["id"] == env["id"]
    # The refusal names the number's place, as a lone surrogate's does (decision 1201).
    assert err["data"]["pointer"] == "/params/payload/arguments/n/value"
    assert err["message"].endswith("(the number at /params/payload/arguments/n/value)")


def test_method_not_found(runtime: Runtime) -> None:
    client = session(runtime)
    resp = step(runtime, client, "steps/nonexistent", {})
    err = assert_error(resp, -32601)
    assert err["data"]["method"] == "steps/nonexistent"


@pytest.mark.parametrize(
    ("method", "payload", "pointer"),
    [
        ("steps/toolCallRequest", {"tool": {"name": "ls"}}, "/params/payload"),
        (
            "steps/toolCallRequest",
            {"tool": {"name": "ls"}, "arguments": {"x": "bare"}},
            "/params/payload/arguments/x",
        ),
        ("steps/turnEnd", {"turn_id": "t1", "outcome": "exploded"}, "/params/payload/outcome"),
        (
            "handshake/hello",
            {
                "acs_versions_supported": ["0.1.0"],
                "methods_implemented": [],
                "provenance_producer": "none",
            },
            "/params/payload",
        ),
        (
            "protocols/MCP/tools/call",
            {"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {}},
            "/params/payload/jsonrpc",
        ),
        (
            "protocols/MCP/tools/call",
            {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {}},
            "/params/payload/method",
        ),
    ],
)
def test_invalid_params(runtime: Runtime, method: str, payload: dict[str, Any], pointer: str):
    client = session(runtime) if method != "handshake/hello" else service_client(runtime)
    resp = step(runtime, client, method, payload)
    err = assert_error(resp, -32602)
    assert err["data"]["pointer"] == pointer
    assert err["data"]["method"] == method


def test_no_common_transport(runtime: Runtime) -> None:
    client = service_client(runtime)
    err = assert_error(hello(runtime, client, transports=("stdio",)), -32000)
    assert err["data"]["reason"] == "no_common_transport"
    assert runtime.store.load_session(client.session_id) is None


def test_renegotiation_not_supported(runtime: Runtime) -> None:
    client = session(runtime)
    err = assert_error(hello(runtime, client), -32000)
    assert err["data"]["reason"] == "renegotiation_not_supported"


def test_unsupported_version(runtime: Runtime) -> None:
    client = service_client(runtime)
    err = assert_error(hello(runtime, client, versions=("2.0.0", "1.3.1")), -32001)
    assert err["data"]["supported_versions"] == ["0.1.0"]
    # A same-major version is accepted (forward compatibility by major).
    other = service_client(runtime)
    assert hello(runtime, other, versions=("0.9.0",))["result"]["negotiated_version"] == "0.1.0"


def test_provenance_required(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(policy_requires_provenance=True)
    client = service_client(rt)
    assert_error(hello(rt, client, provenance_producer="none"), -32002)
    assert rt.store.load_session(client.session_id) is None
    other = service_client(rt)
    result = hello(rt, other, provenance_producer="deterministic")["result"]
    assert result["policy_requires_provenance"] is True


def test_capability_not_negotiated(runtime: Runtime) -> None:
    # A step before any handshake.
    fresh = service_client(runtime)
    err = assert_error(step(runtime, fresh, "steps/toolCallRequest", tool_payload("ls")), -32003)
    assert err["data"]["method"] == "steps/toolCallRequest"
    # A method not in methods_evaluated.
    client = service_client(runtime)
    hello(runtime, client, methods=["steps/toolCallRequest"])
    err = assert_error(step(runtime, client, "steps/userMessage", USER_MESSAGE), -32003)
    assert err["data"]["method"] == "steps/userMessage"
    # ACS-Inspect is not implemented.
    full = session(runtime)
    err = assert_error(step(runtime, full, "agbom/snapshot", {}), -32003)
    assert err["data"]["method"] == "agbom/snapshot"


def test_signature_missing(runtime: Runtime) -> None:
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    resp = exchange(runtime, body(env), client.session_id, signed=False)
    assert_error(resp, -32004)
    assert resp["id"] == env["id"]


def test_signature_wrong(runtime: Runtime) -> None:
    client = session(runtime)
    # Signed under another session's key.
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    wrong = sign_request(env, KEYS.key_for(new_id()), client.key_id)
    assert_error(exchange(runtime, body(wrong), client.session_id, signed=False), -32004)
    # Signed under another IKM.
    other_keys = SessionKeys(bytes(range(1, 33)))
    wrong = sign_request(env, other_keys.key_for(client.session_id), client.key_id)
    assert_error(exchange(runtime, body(wrong), client.session_id, signed=False), -32004)
    # A valid MAC under an algorithm Warden does not verify.
    good = sign_request(env, client.key, client.key_id)
    good["params"]["signature"]["algorithm"] = "ECDSA-P256"
    assert_error(exchange(runtime, body(good), client.session_id, signed=False), -32004)
    # The forged attempts did not burn the request_id: the genuine request is evaluated.
    genuine = sign_request(env, client.key, client.key_id)
    resp = exchange(runtime, body(genuine), client.session_id, signed=True, client=client)
    decision(resp, "allow")


def test_mac_without_payload_is_refused(runtime: Runtime) -> None:
    """Probe D1c: the MAC must cover the whole envelope, payload included."""
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    partial = {**env, "params": {k: v for k, v in env["params"].items() if k != "payload"}}
    signed = sign_request(partial, client.key, client.key_id)
    signed["params"]["payload"] = env["params"]["payload"]
    assert_error(exchange(runtime, body(signed), client.session_id, signed=False), -32004)


def test_replay_request_id(runtime: Runtime) -> None:
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"))
    first = exchange(runtime, body(env), client.session_id, signed=True)
    decision(first, "allow")
    again = exchange(runtime, body(env), client.session_id, signed=True)
    assert_error(again, -32005)
    # The same request_id in a fresh envelope (new timestamp, new signature) is still a replay.
    rid = env["params"]["request_id"]
    fresh = signed_envelope(client, "steps/userMessage", USER_MESSAGE, request_id=rid)
    assert_error(exchange(runtime, body(fresh), client.session_id, signed=True), -32005)


def test_replay_handshake(runtime: Runtime) -> None:
    client = service_client(runtime)
    env = client.envelope("handshake/hello", hello_payload())
    assert (
        "negotiated_version"
        in exchange(runtime, body(env), client.session_id, signed=True)["result"]
    )
    assert_error(exchange(runtime, body(env), client.session_id, signed=True), -32005)


def test_replay_nonce(runtime: Runtime) -> None:
    client = session(runtime)
    nonce = "n0nce-" + "x" * 20
    env = signed_envelope(client, "steps/toolCallRequest", tool_payload("ls"), nonce=nonce)
    decision(exchange(runtime, body(env), client.session_id, signed=True), "allow")
    other = signed_envelope(client, "steps/toolCallRequest", tool_payload("pwd"), nonce=nonce)
    assert other["params"]["request_id"] != env["params"]["request_id"]
    assert_error(exchange(runtime, body(other), client.session_id, signed=True), -32005)
    # A different nonce is fine.
    third = signed_envelope(client, "steps/toolCallRequest", tool_payload("pwd"), nonce="y" * 16)
    decision(exchange(runtime, body(third), client.session_id, signed=True), "allow")


@pytest.mark.parametrize("offset_s", [3600, -3600, 301, -301])
def test_timestamp_out_of_window(runtime: Runtime, offset_s: int) -> None:
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), timestamp=rfc3339(offset_s))
    resp = exchange(runtime, body(env), client.session_id, signed=True)
    err = assert_error(resp, -32006)
    assert err["data"]["skew_window_ms"] == 300_000
    # Recorded on arrival: the replay of a refused request is -32005.
    assert_error(exchange(runtime, body(env), client.session_id, signed=True), -32005)


def test_timestamp_inside_window(runtime: Runtime) -> None:
    client = session(runtime)
    for offset_s in (290, -290):
        env = client.envelope(
            "steps/toolCallRequest", tool_payload("ls"), timestamp=rfc3339(offset_s)
        )
        decision(
            exchange(runtime, body(env), client.session_id, signed=True, client=client), "allow"
        )


def test_handshake_is_skew_checked(runtime: Runtime) -> None:
    client = service_client(runtime)
    env = client.envelope("handshake/hello", hello_payload(), timestamp=rfc3339(-3600))
    err = assert_error(exchange(runtime, body(env), client.session_id, signed=True), -32006)
    assert err["data"]["skew_window_ms"] == 300_000
    assert runtime.store.load_session(client.session_id) is None


# -- the chain behind the published heads ------------------------------------------------------


def _ind_jcs(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_published_heads_are_the_section_8_2_chain(runtime: Runtime) -> None:
    """Recompute, independently of Warden, every entry hash and request_hash behind the
    chain_hash values a session received, and run Warden's offline verifier on the export."""
    client = session(runtime)
    sent: dict[str, dict[str, Any]] = {}
    published: list[str] = []
    calls: list[tuple[str, dict[str, Any]]] = [
        ("steps/sessionStart", {}),
        ("steps/userMessage", USER_MESSAGE),
        ("steps/toolCallRequest", tool_payload("ls", path="/tmp")),
        ("steps/toolCallRequest", tool_payload("Bash", command="rm -rf /")),
        ("steps/toolCallResult", {"tool": {"name": "ls"}, "exit_status": "success", "outputs": []}),
        ("steps/sessionEnd", {"reason": "completed"}),
    ]
    for method, payload in calls:
        env = client.envelope(method, payload)
        sent[env["params"]["request_id"]] = env["params"]
        resp = exchange(runtime, body(env), client.session_id, signed=True, client=client)
        published.append(resp["result"]["chain_hash"])
    assert len(set(published)) == len(published)

    records = list(runtime.store.iter_records(client.session_id))
    entries = [r for r in records if r["kind"] == "entry"]
    assert [r["seq"] for r in entries] == list(range(len(calls)))
    prev: str | None = None
    for rec, head in zip(entries, published, strict=True):
        entry = rec["entry"]
        content = {k: v for k, v in entry.items() if k not in ("entry_hash", "previous_hash")}
        assert entry.get("previous_hash") == prev
        digest = hashlib.sha256(_ind_jcs(content) + (bytes.fromhex(prev) if prev else b""))
        assert digest.hexdigest() == entry["entry_hash"] == head
        params = sent[entry["step_id"]]
        assert entry["request_hash"] == hashlib.sha256(_ind_jcs(params)).hexdigest()
        assert entry["timestamp"] == params["timestamp"]
        assert canonical_bytes(content) == _ind_jcs(content)
        prev = entry["entry_hash"]
    report = verify_records(records, ikm=TEST_IKM)
    assert report.entries == len(calls)
    assert report.heads[client.session_id] == published[-1]


def test_numeric_id_is_echoed(runtime: Runtime) -> None:
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"), sign=False)
    env["id"] = 42
    env = sign_request(env, client.key, client.key_id)
    resp = exchange(runtime, body(env), client.session_id, signed=True, client=client)
    assert resp["id"] == 42
    decision(resp, "allow")
    env = client.envelope("steps/nonexistent", {}, sign=False)
    env["id"] = -7.5
    resp = exchange(
        runtime, body(sign_request(env, client.key, client.key_id)), client.session_id, signed=True
    )
    assert_error(resp, -32601)
    assert resp["id"] == -7.5


# -- dispatch order (specs/acs.md §17, REF-PY) -----------------------------------------------


def test_replay_is_checked_before_every_other_step_check(runtime: Runtime) -> None:
    """A used request_id is -32005 whatever else is wrong with the new envelope."""
    client = session(runtime)
    env = client.envelope("steps/toolCallRequest", tool_payload("ls"))
    decision(exchange(runtime, body(env), client.session_id, signed=True, client=client), "allow")
    rid = env["params"]["request_id"]
    other_key = service_client(runtime, session_id=client.session_id, key_id="k2")
    # Another agent's key is not told of the session's request ids either: the session
    # reads as missing to it (decision 1005).
    reused = other_key.envelope("steps/toolCallRequest", tool_payload("ls"), request_id=rid)
    resp = exchange(runtime, body(reused), client.session_id, signed=True, client=other_key)
    assert assert_error(resp, -32003)["message"] == "no handshake/hello for this session"
    variants = [
        (
            client,
            claiming(client, "a2").envelope(
                "steps/toolCallRequest", tool_payload("ls"), request_id=rid
            ),
        ),
        (
            client,
            client.envelope(
                "steps/toolCallRequest",
                tool_payload("ls"),
                request_id=rid,
                timestamp=rfc3339(-3600),
            ),
        ),
        (
            client,
            client.envelope("steps/toolCallRequest", {"tool": {"name": "ls"}}, request_id=rid),
        ),
    ]
    for signer, variant in variants:
        resp = exchange(runtime, body(variant), client.session_id, signed=True, client=signer)
        assert_error(resp, -32005)


def test_step_check_order(runtime: Runtime) -> None:
    """owner → agent_id → closed → negotiated method → skew → payload schema."""
    client = service_client(runtime)
    hello(runtime, client, methods=["steps/toolCallRequest", "steps/sessionEnd"])
    late = rfc3339(-3600)

    def send(c: AcsClient, method: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return exchange(
            runtime,
            body(c.envelope(method, payload, **kw)),
            client.session_id,
            signed=True,
            client=c,
        )

    both = service_client(runtime, session_id=client.session_id, key_id="k2", agent_id="a2")
    agent = claiming(client, "a2")
    # Another agent's key: the session reads as missing (decision 1005), before anything.
    assert_error(send(both, "steps/userMessage", {}, timestamp=late), -32003)
    # Binding before everything else.
    assert decision(send(agent, "steps/userMessage", {}, timestamp=late), "deny")[
        "reason_codes"
    ] == ["agent_id_not_bound"]
    # Negotiation before skew, skew before the payload schema.
    assert_error(send(client, "steps/userMessage", {}, timestamp=late), -32003)
    assert_error(send(client, "steps/toolCallRequest", {}, timestamp=late), -32006)
    assert_error(send(client, "steps/toolCallRequest", {}), -32602)
    # Once closed: the closed-session deny comes before negotiation.
    decision(send(client, "steps/sessionEnd", {"reason": "completed"}), "allow")
    assert decision(send(client, "steps/userMessage", {}, timestamp=late), "deny")[
        "reason_codes"
    ] == ["session_closed"]
    assert decision(send(agent, "steps/userMessage", {}), "deny")["reason_codes"] == [
        "agent_id_not_bound"
    ]


def test_pre_session_order(runtime: Runtime) -> None:
    """Envelope → signature → route → session lookup, for a session that never shook hands."""
    client = service_client(runtime)
    unsigned = client.envelope("steps/nonexistent", {}, sign=False)
    assert_error(exchange(runtime, body(unsigned), client.session_id, signed=False), -32004)
    assert_error(step(runtime, client, "steps/nonexistent", {}), -32601)
    assert_error(step(runtime, client, "agbom/snapshot", {}), -32003)
    # A payload error is not reported before the missing handshake.
    assert_error(step(runtime, client, "steps/toolCallRequest", {}), -32003)
    assert runtime.store.load_session(client.session_id) is None
