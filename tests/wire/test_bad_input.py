"""Malformed requests get the exact JSON-RPC error and change nothing.

Every case runs in process (``AcsService.handle``) and over HTTP against a real
``warden serve``. Each starts from an established session (handshake + one step, so every
table has rows) and a correctly signed ``steps/toolCallRequest`` for it, then breaks one
thing. The answer must be the exact, unsigned JSON-RPC error (-32700 with id null for bytes
that are not strict JSON; -32600 for an invalid envelope, a value outside the JCS domain, a
batch or an oversized body) and the store's row counts must not move.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from conftest import start_server
from wire_targets import InProcess, OverHttp, Target

from warden.crypto.hmac_keys import SessionKeys
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient, verify_response
from warden.wire.acs.signing import sign_request

MAX_BODY = 1 << 20
SLOT = '"__SLOT__"'
PAYLOAD = {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "__SLOT__"}}}


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    srv = start_server(tmp_path_factory.mktemp("srv"))
    yield srv
    srv.stop()


@pytest.fixture(params=["in_process", "http"])
def target(request: pytest.FixtureRequest, runtime: Runtime) -> Iterator[Target]:
    if request.param == "in_process":
        yield InProcess(runtime)
        return
    over_http = OverHttp(request.getfixturevalue("http_server"))
    yield over_http
    over_http.close()


@pytest.fixture
def session(target: Target) -> AcsClient:
    client = target.client(track_chain=False)
    assert "result" in client.hello()
    assert client.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    return client


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _with(env: dict[str, Any], path: str, value: Any) -> bytes:
    """``env`` with the member at dotted ``path`` set (or deleted when value is DELETE)."""
    out = copy.deepcopy(env)
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return _dumps(out).encode()


DELETE = object()


@dataclass(frozen=True)
class Bad:
    name: str
    make: Callable[[dict[str, Any], str], bytes]  # (signed envelope, its JSON text) -> body
    code: int
    echo_id: bool  # True: the envelope's id is echoed; False: id is null
    reason: str
    pointer: str | None = None  # data.pointer, when the error carries one


def _slot(token: str) -> Callable[[dict[str, Any], str], bytes]:
    return lambda _env, text: text.replace(SLOT, token).encode()


def _replace(old: str, new: str) -> Callable[[dict[str, Any], str], bytes]:
    def make(_env: dict[str, Any], text: str) -> bytes:
        assert old in text
        return text.replace(old, new, 1).encode()

    return make


CASES: tuple[Bad, ...] = (
    # -32700: not strict JSON; the id cannot be known.
    Bad("not_json", lambda _e, t: t[: len(t) // 2].encode(), -32700, False, "invalid_json"),
    Bad("empty_body", lambda _e, _t: b"", -32700, False, "invalid_json"),
    Bad("whitespace_body", lambda _e, _t: b" \r\n\t", -32700, False, "invalid_json"),
    Bad(
        "invalid_utf8",
        lambda _e, t: t.encode().replace(b"read_file", b"read_\xff\xfe"),
        -32700,
        False,
        "invalid_utf8",
    ),
    Bad(
        "overlong_utf8",
        lambda _e, t: t.encode().replace(b"read_file", b"read\xc0\xaffile"),
        -32700,
        False,
        "invalid_utf8",
    ),
    Bad(
        "duplicate_key_top_level",
        lambda _e, t: t.replace(
            '{"jsonrpc": "2.0"', '{"jsonrpc": "2.0", "jsonrpc": "2.0"', 1
        ).encode(),
        -32700,
        False,
        "duplicate_key",
    ),
    Bad(
        "duplicate_key_in_payload",
        lambda _e, t: t.replace(
            '"name": "read_file"', '"name": "read_file", "name": "rm"', 1
        ).encode(),
        -32700,
        False,
        "duplicate_key",
    ),
    Bad("nan_token", _slot("NaN"), -32700, False, "non_standard_number"),
    Bad("infinity_token", _slot("Infinity"), -32700, False, "non_standard_number"),
    Bad("negative_infinity_token", _slot("-Infinity"), -32700, False, "non_standard_number"),
    # -32600: parses, but outside the JCS domain (id known, so echoed).
    # -32700: nested deeper than the request limit (128), before anything else reads it.
    Bad("nesting_129", _slot("[" * 129 + "]" * 129), -32700, False, "too_deep"),
    Bad("nesting_1000", _slot("[" * 1000 + "]" * 1000), -32700, False, "too_deep"),
    Bad("nesting_bare_1000", lambda _e, _t: b"[" * 1000 + b"]" * 1000, -32700, False, "too_deep"),
    Bad("float_1e400", _slot("1e400"), -32600, True, "jcs_domain"),
    # Exactly 2^60, but RFC 8785 writes that double 1152921504606847000 (decisions.md 192).
    Bad("integer_2_pow_60", _slot(str(2**60)), -32600, True, "jcs_domain"),
    Bad("integer_2_pow_53_plus_1", _slot(str(2**53 + 1)), -32600, True, "jcs_domain"),
    Bad("lone_surrogate", _slot('"\\ud800"'), -32600, True, "jcs_domain"),
    # A lone surrogate anywhere, also where the envelope schema looks first (was -32603).
    Bad(
        "lone_surrogate_in_method",
        _replace('"steps/toolCallRequest"', '"steps/toolCallRequest\\ud800"'),
        -32600,
        True,
        "jcs_domain",
        "/method",
    ),
    Bad(
        "lone_surrogate_in_request_id",
        lambda e, t: t.replace(
            f'"request_id": "{e["params"]["request_id"]}"', '"request_id": "\\udc00"'
        ).encode(),
        -32600,
        True,
        "jcs_domain",
        "/params/request_id",
    ),
    Bad(
        "lone_surrogate_in_session_id",
        lambda e, t: t.replace(
            f'"session_id": "{e["params"]["metadata"]["session_id"]}"', '"session_id": "\\ud800"'
        ).encode(),
        -32600,
        True,
        "jcs_domain",
        "/params/metadata/session_id",
    ),
    Bad(
        "lone_surrogate_in_timestamp",
        lambda e, t: t.replace(
            f'"timestamp": "{e["params"]["timestamp"]}"', '"timestamp": "\\uDBFF"'
        ).encode(),
        -32600,
        True,
        "jcs_domain",
        "/params/timestamp",
    ),
    Bad(
        "lone_surrogate_in_signature_algorithm",
        _replace('"algorithm": "HMAC-SHA256"', '"algorithm": "\\ud800"'),
        -32600,
        True,
        "jcs_domain",
        "/params/signature/algorithm",
    ),
    Bad(
        "lone_surrogate_in_signature_key_id",
        # The clients sign as registered agents, whose key ids start agk_ (issue 15).
        _replace('"key_id": "agk_', '"key_id": "\\ud800agk_'),
        -32600,
        True,
        "jcs_domain",
        "/params/signature/key_id",
    ),
    Bad(
        "lone_surrogate_member_name",
        _replace('{"jsonrpc": "2.0"', '{"x\\ud800": 1, "jsonrpc": "2.0"'),
        -32600,
        True,
        "jcs_domain",
        "/",
    ),
    Bad(
        "lone_surrogate_in_id",  # an id that cannot be echoed is answered with id null
        lambda e, t: t.replace(f'"id": "{e["id"]}"', '"id": "\\ud800"', 1).encode(),
        -32600,
        False,
        "jcs_domain",
        "/id",
    ),
    # -32600: not a valid request envelope.
    Bad(
        "method_number",
        lambda e, _t: _with(e, "method", 7),
        -32600,
        True,
        "invalid_request",
        "/method",
    ),
    Bad(
        "method_unknown_namespace",
        lambda e, _t: _with(e, "method", "tools/call"),
        -32600,
        True,
        "invalid_request",
        "/method",
    ),
    Bad(
        "params_list",
        lambda e, _t: _with(e, "params", []),
        -32600,
        True,
        "invalid_request",
        "/params",
    ),
    Bad(
        "jsonrpc_1_0",
        lambda e, _t: _with(e, "jsonrpc", "1.0"),
        -32600,
        True,
        "invalid_request",
        "/jsonrpc",
    ),
    Bad("id_null", lambda e, _t: _with(e, "id", None), -32600, False, "invalid_request", "/id"),
    Bad(
        "id_object", lambda e, _t: _with(e, "id", {"n": 1}), -32600, False, "invalid_request", "/id"
    ),
    Bad("id_bool", lambda e, _t: _with(e, "id", True), -32600, False, "invalid_request", "/id"),
    Bad("id_missing", lambda e, _t: _with(e, "id", DELETE), -32600, False, "invalid_request", ""),
    Bad(
        "id_1e400",
        lambda e, t: t.replace(f'"id": "{e["id"]}"', '"id": 1e400', 1).encode(),
        -32600,
        False,
        "invalid_request",
        "/id",
    ),
    Bad("extra_member", lambda e, _t: _with(e, "extra", 1), -32600, True, "invalid_request", ""),
    Bad("no_params", lambda e, _t: _with(e, "params", DELETE), -32600, True, "invalid_request", ""),
    Bad(
        "no_metadata",
        lambda e, _t: _with(e, "params.metadata", DELETE),
        -32600,
        True,
        "invalid_request",
        "/params",
    ),
    Bad(
        "no_payload",
        lambda e, _t: _with(e, "params.payload", DELETE),
        -32600,
        True,
        "invalid_request",
        "/params",
    ),
    Bad(
        "payload_list",
        lambda e, _t: _with(e, "params.payload", []),
        -32600,
        True,
        "invalid_request",
        "/params/payload",
    ),
    Bad(
        "no_session_id",
        lambda e, _t: _with(e, "params.metadata.session_id", DELETE),
        -32600,
        True,
        "invalid_request",
        "/params/metadata",
    ),
    Bad(
        "session_id_not_uuid",
        lambda e, _t: _with(e, "params.metadata.session_id", "s-1"),
        -32600,
        True,
        "invalid_request",
        "/params/metadata/session_id",
    ),
    Bad(
        "no_agent_id",
        lambda e, _t: _with(e, "params.metadata.agent_id", DELETE),
        -32600,
        True,
        "invalid_request",
        "/params/metadata",
    ),
    Bad(
        "no_request_id",
        lambda e, _t: _with(e, "params.request_id", DELETE),
        -32600,
        True,
        "invalid_request",
        "/params",
    ),
    Bad(
        "request_id_not_uuid",
        lambda e, _t: _with(e, "params.request_id", "req-1"),
        -32600,
        True,
        "invalid_request",
        "/params/request_id",
    ),
    Bad(
        "bad_timestamp",
        lambda e, _t: _with(e, "params.timestamp", "yesterday"),
        -32600,
        True,
        "invalid_request",
        "/params/timestamp",
    ),
    Bad(
        "timestamp_number",
        lambda e, _t: _with(e, "params.timestamp", 1700000000),
        -32600,
        True,
        "invalid_request",
        "/params/timestamp",
    ),
    Bad(
        "bad_acs_version",
        lambda e, _t: _with(e, "params.acs_version", "v1"),
        -32600,
        True,
        "invalid_request",
        "/params/acs_version",
    ),
    Bad(
        "short_nonce",
        lambda e, _t: _with(e, "params.nonce", "abc"),
        -32600,
        True,
        "invalid_request",
        "/params/nonce",
    ),
    Bad(
        "top_level_string",
        lambda _e, _t: b'"steps/toolCallRequest"',
        -32600,
        False,
        "invalid_request",
        "",
    ),
    Bad("top_level_null", lambda _e, _t: b"null", -32600, False, "invalid_request", ""),
    Bad("batch", lambda _e, t: f"[{t}]".encode(), -32600, False, "batch_unsupported"),
    Bad("empty_batch", lambda _e, _t: b"[]", -32600, False, "batch_unsupported"),
    Bad(
        "oversized_body",
        lambda _e, t: (t + " " * MAX_BODY).encode(),
        -32600,
        False,
        "body_too_large",
    ),
)


def _signed_envelope(client: AcsClient) -> tuple[dict[str, Any], str]:
    env = client.envelope("steps/toolCallRequest", copy.deepcopy(PAYLOAD))
    text = _dumps(env)
    assert text.count(SLOT) == 1
    return env, text


def _assert_plain_error(
    response: dict[str, Any], *, code: int, rid: Any, reason: str, pointer: str | None = None
) -> None:
    assert set(response) == {"jsonrpc", "id", "error"}, response
    assert response["jsonrpc"] == "2.0"
    assert response["id"] == rid
    error = response["error"]
    assert set(error) == {"code", "message", "data"}, "a pre-authentication error is unsigned"
    assert error["code"] == code
    assert error["data"]["reason"] == reason
    assert error["data"]["message"] == error["message"]
    assert isinstance(error["message"], str) and error["message"]
    if pointer is not None:
        assert error["data"]["pointer"] == pointer


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_refused_and_nothing_written(
    case: Bad, target: Target, session: AcsClient
) -> None:
    env, text = _signed_envelope(session)
    body = case.make(env, text)
    before = target.counts()
    assert before["sessions"] >= 1 and before["entries"] >= 1
    response = target.send(body)
    _assert_plain_error(
        response,
        code=case.code,
        rid=env["id"] if case.echo_id else None,
        reason=case.reason,
        pointer=case.pointer,
    )
    assert target.counts() == before


def test_the_untouched_envelope_is_accepted(target: Target, session: AcsClient) -> None:
    """Control for the table above: the unbroken request is answered and chained."""
    _, text = _signed_envelope(session)
    before = target.counts()
    response = target.send(text.encode())
    assert response["result"]["decision"] == "allow"
    assert verify_response(response, session.key)
    # The chained request id is recorded by its entry, not a replay_keys row (decision 273).
    assert target.counts() == {**before, "entries": before["entries"] + 1}


@pytest.mark.parametrize("extra", [0, 1], ids=["exactly_1MiB", "1MiB_plus_1"])
def test_body_size_boundary(target: Target, session: AcsClient, extra: int) -> None:
    env = session.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    text = _dumps(env)
    body = (text + " " * (MAX_BODY - len(text.encode()) + extra)).encode()
    assert len(body) == MAX_BODY + extra
    before = target.counts()
    response = target.send(body)
    if extra == 0:
        assert response["result"]["decision"] == "allow"
        assert target.counts()["entries"] == before["entries"] + 1
    else:
        _assert_plain_error(response, code=-32600, rid=None, reason="body_too_large")
        assert target.counts() == before


def test_bad_signature_refused_unsigned_and_nothing_written(
    target: Target, session: AcsClient
) -> None:
    env = session.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    env["params"]["payload"]["tool"]["name"] = "delete_file"  # after signing
    before = target.counts()
    response = target.send(_dumps(env).encode())
    _assert_plain_error(response, code=-32004, rid=env["id"], reason="signature_invalid")
    assert target.counts() == before


def _with_trailing_bits(value: str) -> str:
    """The same 32 bytes in base64 with the two unused bits of the last character set
    (RFC 4648 §3.5): decoders that ignore them read the same MAC."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    assert len(value) == 44 and value.endswith("=")
    last = alphabet.index(value[42])
    assert last & 0b11 == 0
    return value[:42] + alphabet[last | 0b11] + "="


def test_non_canonical_base64_signature_is_refused(target: Target, session: AcsClient) -> None:
    env = session.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    value = env["params"]["signature"]["value"]
    twin = _with_trailing_bits(value)
    assert base64.b64decode(twin) == base64.b64decode(value)  # what a lax decoder sees
    env["params"]["signature"]["value"] = twin
    before = target.counts()
    response = target.send(_dumps(env).encode())
    _assert_plain_error(response, code=-32004, rid=env["id"], reason="signature_invalid")
    assert target.counts() == before
    env["params"]["signature"]["value"] = value  # control: the canonical text verifies
    assert target.send(_dumps(env).encode())["result"]["decision"] == "allow"


@pytest.mark.parametrize(
    "literal",
    ["100000000000000000000", "9007199254740992", "-1152921504606847000", "999999999999999900000"],
)
def test_integers_a_jcs_signer_writes_as_digits_are_accepted(
    target: Target, session: AcsClient, literal: str
) -> None:
    """A double beyond 2^53 written as ECMAScript (and so every RFC 8785 serializer)
    writes it: plain digits below 10^21. The signature is made the way such a client
    makes it, with the rfc8785 library over the double."""
    env = session.envelope(
        "steps/toolCallRequest",
        {"tool": {"name": "read_file"}, "arguments": {"path": {"value": float(literal)}}},
        sign=False,
    )
    signed = rfc8785.dumps(env)
    assert literal.encode() in signed  # the serializer writes the digits
    mac = hmac.new(session.key, signed, hashlib.sha256).digest()
    env["params"]["signature"] = {
        "algorithm": "HMAC-SHA256",
        "value": base64.b64encode(mac).decode(),
        "key_id": session.key_id,
    }
    body = _dumps(env).replace(f"{float(literal)!r}", literal)
    assert f'"value": {literal}}}' in body
    before = target.counts()
    response = target.send(body.encode())
    assert response["result"]["decision"] == "allow", response
    assert verify_response(response, session.key)
    assert target.counts()["entries"] == before["entries"] + 1


@pytest.mark.parametrize(
    "arguments",
    [
        {"amount_usd": 1500.5, "rate": 0.0375},  # the encoder writes these as they are
        {"amount_usd": 2500.0, "fee": -0.0, "big": 2.0**60},  # integral: ECMAScript digits
        {"tiny": 1e-7, "small": 1.5e-5, "huge": 1e21, "least": 5e-324},  # exponent forms
        {"\U0001f600": 0.5, "\ue000": 1.0, "a": [3.0, 1e-9]},  # UTF-16 member order
    ],
    ids=["direct", "integral", "exponents", "astral_keys"],
)
def test_floats_signed_with_rfc8785_verify_through_the_fast_path(
    target: Target, session: AcsClient, arguments: dict[str, Any]
) -> None:
    """Issue 16: Warden no longer canonicalizes these with rfc8785; a client that does
    (the signing input made by the library, not by Warden) must still verify."""
    env = session.envelope(
        "steps/toolCallRequest",
        {
            "tool": {"name": "read_file"},
            "arguments": {"path": {"value": "a"}} | {k: {"value": v} for k, v in arguments.items()},
        },
        sign=False,
    )
    mac = hmac.new(session.key, rfc8785.dumps(env), hashlib.sha256).digest()
    env["params"]["signature"] = {
        "algorithm": "HMAC-SHA256",
        "value": base64.b64encode(mac).decode(),
        "key_id": session.key_id,
    }
    before = target.counts()
    response = target.send(_dumps(env).encode())
    assert response["result"]["decision"] == "allow", response
    assert verify_response(response, session.key)
    assert target.counts()["entries"] == before["entries"] + 1


@pytest.mark.parametrize(
    ("arguments", "rid"),
    [
        ({"amount_usd": 2500.0, "fee": -0.0, "qty": [3.0, 1.0]}, None),
        ({"amount_usd": 2500.0, "big": 2.0**60, "tiny": 1e-7, "huge": 1e21}, None),
        ({"amount_usd": 2500.0, "memo": "2500.0"}, None),  # the float's text in a string
        ({"amount_usd": 2500.0}, 3.0),  # a float outside params
        ({"\U0001f600": 1.0, "\ue000": 2.0}, None),  # UTF-16 member order: walked
    ],
    ids=["integral", "exponents", "text_in_a_string", "float_id", "astral_keys"],
)
def test_request_hash_of_float_arguments_is_their_rfc8785_hash(
    runtime: Runtime, arguments: dict[str, Any], rid: float | None
) -> None:
    """Issue 16: a request's integral floats are made ints in one copy that is both
    verified and hashed; the signature must verify and the entry's request_hash must be
    the rfc8785 hash of the params as sent."""
    target = InProcess(runtime)
    client = target.client(track_chain=False)
    assert "result" in client.hello()
    env = client.envelope(
        "steps/toolCallRequest",
        {
            "tool": {"name": "read_file"},
            "arguments": {"path": {"value": "a"}} | {k: {"value": v} for k, v in arguments.items()},
        },
        sign=False,
    )
    if rid is not None:
        env["id"] = rid
    mac = hmac.new(client.key, rfc8785.dumps(env), hashlib.sha256).digest()
    env["params"]["signature"] = {
        "algorithm": "HMAC-SHA256",
        "value": base64.b64encode(mac).decode(),
        "key_id": client.key_id,
    }
    response = target.send(_dumps(env).encode())
    assert response["result"]["decision"] == "allow", response
    entries = [
        r["entry"] for r in runtime.store.iter_records(client.session_id) if r["kind"] == "entry"
    ]
    expected = rfc8785.dumps(env["params"])
    assert entries[-1]["step_id"] == env["params"]["request_id"]
    assert entries[-1]["request_hash"] == hashlib.sha256(expected).hexdigest()


def test_signed_unknown_method_writes_nothing(target: Target, session: AcsClient) -> None:
    env = session.envelope("steps/launchMissiles", {})
    before = target.counts()
    response = target.send(_dumps(env).encode())
    assert response["error"]["code"] == -32601
    assert response["error"]["data"]["reason"] == "method_not_found"
    assert verify_response(response, session.key), "authenticated: the error is signed"
    assert target.counts() == before


@pytest.mark.parametrize("with_nonce", [False, True], ids=["request_id", "request_id+nonce"])
def test_payload_schema_failure_records_replay_keys_only(
    target: Target, session: AcsClient, with_nonce: bool
) -> None:
    """-32602 for a signed request whose payload fails its hook schema: its replay keys
    are recorded (its replay must get -32005) but no chain entry is written."""
    env = session.envelope("steps/toolCallRequest", {"tool": {"name": "read_file"}})
    if with_nonce:
        env["params"]["nonce"] = "n" * 24
        env = sign_request(env, session.key, session.key_id)
    body = _dumps(env).encode()
    before = target.counts()

    response = target.send(body)
    assert response["id"] == env["id"]
    error = response["error"]
    assert error["code"] == -32602
    assert error["data"]["reason"] == "invalid_params"
    assert error["data"]["pointer"] == "/params/payload"
    assert error["data"]["method"] == "steps/toolCallRequest"
    assert "arguments" in error["message"]
    assert verify_response(response, session.key)
    keys = 2 if with_nonce else 1
    assert target.counts() == {**before, "replay_keys": before["replay_keys"] + keys}

    replayed = target.send(body)
    assert replayed["error"]["code"] == -32005
    assert replayed["error"]["data"]["reason"] == "replay_detected"
    assert verify_response(replayed, session.key)
    assert target.counts() == {**before, "replay_keys": before["replay_keys"] + keys}


def test_nonce_reuse_under_new_request_id_is_a_replay(target: Target, session: AcsClient) -> None:
    first = session.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    first["params"]["nonce"] = "k" * 32
    first = sign_request(first, session.key, session.key_id)
    assert target.send(_dumps(first).encode())["result"]["decision"] == "allow"
    before = target.counts()
    second = session.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    second["params"]["nonce"] = "k" * 32
    second = sign_request(second, session.key, session.key_id)
    response = target.send(_dumps(second).encode())
    assert response["error"]["code"] == -32005
    assert target.counts() == before


def test_other_session_key_is_refused(target: Target, session: AcsClient) -> None:
    """A request signed with another session's key does not authenticate."""
    env = session.envelope(
        "steps/toolCallRequest", {"tool": {"name": "read_file"}, "arguments": {}}
    )
    other = SessionKeys(bytes(range(32))).key_for("00000000-0000-4000-8000-000000000000")
    env = sign_request(env, other, session.key_id)
    before = target.counts()
    response = target.send(_dumps(env).encode())
    _assert_plain_error(response, code=-32004, rid=env["id"], reason="signature_invalid")
    assert target.counts() == before


def test_server_fixture_refuses_not_json(server: Any, tmp_path: Path) -> None:
    """The per-test ``server`` fixture too: a parse error, nothing created on disk."""
    target = OverHttp(server)
    before = target.counts()
    try:
        response = target.send(b"{not json")
    finally:
        target.close()
    _assert_plain_error(response, code=-32700, rid=None, reason="invalid_json")
    assert target.counts() == before == {"sessions": 0, "replay_keys": 0, "entries": 0}
