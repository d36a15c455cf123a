"""The legacy AdCP HMAC-SHA256 webhook scheme against every vector of
webhook-hmac-sha256.json (specs/adcp-spend-kla.md §1.4), plus secrets and the webhooks file."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED, asset

from warden.approvals import webhooks
from warden.approvals.webhooks import (
    DuplicateKeyInput,
    InvalidBodyInput,
    VerifyOutcome,
    WeakSecret,
    WebhookConfig,
    WebhooksFile,
    check_secret,
    encode_body,
    load_webhooks,
    parse_webhooks,
    sign,
    sign_request,
    verify,
)
from warden.errors import ConfigError

VECTOR_ASSET = "adcp/webhook-hmac-sha256.json"
SHARED_VECTORS = SHARED / "specs/files/adcp/test-vectors-static/webhook-hmac-sha256.json"
DOC: dict[str, Any] = json.loads(asset(VECTOR_ASSET).read_text(encoding="utf-8"))
SECRET: str = DOC["secret"]
VECTORS = DOC["vectors"]
REJECTIONS = DOC["rejection_vectors"]
SECRET_REJECTIONS = DOC["secret_rejection_vectors"]
SIGNER_REJECTIONS = DOC["signer_side"]["rejection_vectors"]
SIGNER_POSITIVES = DOC["signer_side"]["positive_vectors"]
DUPLICATE_VECTOR = "duplicate-keys-conflicting-values"

# The failure class each rejection vector must get (a new vector fails test_table_is_complete).
REJECTION_CLASS = {
    "truncated-signature": VerifyOutcome.SIGNATURE_INVALID,
    "wrong-algorithm-prefix": VerifyOutcome.SIGNATURE_INVALID,
    "empty-signature": VerifyOutcome.MISSING_HEADER,
    "missing-signature": VerifyOutcome.MISSING_HEADER,
    "timestamp-too-old": VerifyOutcome.TIMESTAMP_OUT_OF_WINDOW,
    "timestamp-too-future": VerifyOutcome.TIMESTAMP_OUT_OF_WINDOW,
    "non-numeric-timestamp": VerifyOutcome.INVALID_TIMESTAMP,
    "body-tampered": VerifyOutcome.SIGNATURE_INVALID,
    "double-prefix": VerifyOutcome.SIGNATURE_INVALID,
    "signer-spaced-wire-compact": VerifyOutcome.SIGNATURE_INVALID,
}


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v.get("id", v.get("description", "?")) for v in vectors]


def _headers(timestamp: Any, signature: str | None) -> dict[str, str]:
    out = {"X-ADCP-Timestamp": str(timestamp)}
    if signature is not None:
        out["X-ADCP-Signature"] = signature
    return out


def test_vector_copy_equals_shared_original() -> None:
    if not SHARED_VECTORS.exists():
        pytest.skip("../shared is not present")
    assert asset(VECTOR_ASSET).read_bytes() == SHARED_VECTORS.read_bytes()


def test_table_is_complete() -> None:
    assert sorted(REJECTION_CLASS) == sorted(_ids(REJECTIONS))
    assert len(VECTORS) == 15 and len(SECRET_REJECTIONS) == 4


# -- signing ----------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS, ids=_ids(VECTORS))
def test_sign_reproduces_every_vector(vector: dict[str, Any]) -> None:
    raw = vector["raw_body"].encode("utf-8")
    assert sign(SECRET, vector["timestamp"], raw) == vector["expected_signature"]


def test_key_is_the_secret_text_not_hex_decoded() -> None:
    v = VECTORS[0]
    raw = v["raw_body"].encode()
    wrong = (
        "sha256="
        + hmac.new(
            bytes.fromhex(SECRET), b"%d.%s" % (v["timestamp"], raw), hashlib.sha256
        ).hexdigest()
    )
    assert sign(SECRET, v["timestamp"], raw) == v["expected_signature"] != wrong


def test_body_from_a_mapping_uses_compact_separators() -> None:
    v = next(x for x in VECTORS if x["id"] == "compact-whitespace-keys")
    request = sign_request(SECRET, json.loads(v["raw_body"]), v["timestamp"])
    assert request.body == v["raw_body"].encode()
    assert request.headers["X-ADCP-Signature"] == v["expected_signature"]
    assert request.headers["X-ADCP-Timestamp"] == str(v["timestamp"])
    assert request.headers["Content-Type"] == "application/json"


def test_pre_serialized_text_is_signed_as_is() -> None:
    v = next(x for x in VECTORS if x["id"] == "spaced-python-default")
    request = sign_request(SECRET, v["raw_body"], v["timestamp"])
    assert request.body == v["raw_body"].encode()
    assert request.headers["X-ADCP-Signature"] == v["expected_signature"]


@pytest.mark.parametrize("vector", SIGNER_REJECTIONS, ids=_ids(SIGNER_REJECTIONS))
@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_signer_refuses_duplicate_key_input_before_any_hmac(
    vector: dict[str, Any], as_bytes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert vector["expected_signer_action"] == "reject-input-before-sign"

    def no_hmac(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("HMAC computed for refused input")

    monkeypatch.setattr(webhooks.hmac, "new", no_hmac)
    body = vector["signer_input_body"]
    with pytest.raises(DuplicateKeyInput) as info:
        sign_request(SECRET, body.encode() if as_bytes else body, 1700000000)
    assert info.value.reason == "duplicate_key_input"
    assert info.value.keys  # names the offending key


@pytest.mark.parametrize("vector", SIGNER_POSITIVES, ids=_ids(SIGNER_POSITIVES))
def test_signer_signs_clean_input(vector: dict[str, Any]) -> None:
    assert vector["expected_signer_action"] == "sign-and-emit"
    request = sign_request(SECRET, vector["signer_input_body"], 1700000000)
    assert request.body == vector["signer_input_body"].encode()
    assert verify(SECRET, request.headers, request.body, 1700000000).ok


def test_duplicate_key_names_are_sanitized_and_capped() -> None:
    body = '{"a\\u0001bc":1,"a\\u0001bc":2,"' + "k" * 40 + '":1,"' + "k" * 40 + '":2,'
    body += '"x":1,"x":2,"y":1,"y":2,"z":1,"z":2}'
    with pytest.raises(DuplicateKeyInput) as info:
        encode_body(body)
    keys = info.value.keys
    assert len(keys) == 4
    assert keys[0] == "a<sanitized:4>"
    assert keys[1] == "k" * 32


def test_signer_refuses_text_that_is_not_json() -> None:
    with pytest.raises(InvalidBodyInput):
        encode_body("{not json")
    with pytest.raises(InvalidBodyInput):
        encode_body(b"\xff\xfe")


# -- verification -----------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS, ids=_ids(VECTORS))
def test_verify_every_positive_vector(vector: dict[str, Any]) -> None:
    raw = vector["raw_body"].encode("utf-8")
    result = verify(
        SECRET,
        _headers(vector["timestamp"], vector["expected_signature"]),
        raw,
        vector["timestamp"],
    )
    if vector["id"] == DUPLICATE_VECTOR:
        # The signature is valid; the body is malformed: a distinct class, never a mismatch.
        assert vector["expected_verifier_action"] == "reject-malformed"
        assert result.outcome is VerifyOutcome.BODY_MALFORMED
        assert result.outcome.value == vector["rfc9421_error_code"]
        assert result.outcome.action == "reject-malformed"
        assert result.secret_index == 0 and not result.ok
    else:
        assert result.outcome is VerifyOutcome.ACCEPTED, result
        assert result.ok and result.outcome.action == "accept"


@pytest.mark.parametrize("vector", REJECTIONS, ids=_ids(REJECTIONS))
def test_verify_rejects_every_rejection_vector_with_its_class(vector: dict[str, Any]) -> None:
    now = vector.get("current_time", 1700000000)
    result = verify(
        SECRET,
        _headers(vector["timestamp"], vector["signature"]),
        vector["raw_body"].encode("utf-8"),
        now,
    )
    assert result.outcome is REJECTION_CLASS[vector["id"]], result
    assert not result.ok and result.outcome.action == "reject"


def test_tampered_vector_signature_is_valid_for_the_original_body() -> None:
    v = next(x for x in REJECTIONS if x["id"] == "body-tampered")
    assert sign(SECRET, v["timestamp"], b'{"event":"test"}') == v["signature"]


def test_missing_timestamp_and_case_insensitive_headers() -> None:
    body = b'{"event":"test"}'
    sig = sign(SECRET, 1700000000, body)
    assert verify(SECRET, {"X-ADCP-Signature": sig}, body, 1700000000).outcome is (
        VerifyOutcome.MISSING_HEADER
    )
    lower = {"x-adcp-signature": sig, "x-adcp-timestamp": "1700000000"}
    assert verify(SECRET, lower, body, 1700000000).ok


@pytest.mark.parametrize(("skew", "ok"), [(300, True), (-300, True), (301, False), (-301, False)])
def test_window_is_300_seconds_inclusive(skew: int, ok: bool) -> None:
    body = b"{}"
    headers = _headers(1700000000, sign(SECRET, 1700000000, body))
    assert verify(SECRET, headers, body, 1700000000 + skew).ok is ok


def test_rotation_accepts_current_and_previous_secret() -> None:
    new = "n" + SECRET[1:]
    body = b'{"event":"test"}'
    signed_old = _headers(1700000000, sign(SECRET, 1700000000, body))
    signed_new = _headers(1700000000, sign(new, 1700000000, body))
    assert verify([new, SECRET], signed_old, body, 1700000000).secret_index == 1
    assert verify([new, SECRET], signed_new, body, 1700000000).secret_index == 0
    assert verify(new, signed_old, body, 1700000000).outcome is VerifyOutcome.SIGNATURE_INVALID
    with pytest.raises(ValueError):
        verify([], signed_old, body, 1700000000)


def test_uppercase_hex_and_non_ascii_signatures_do_not_verify() -> None:
    body = b"{}"
    sig = sign(SECRET, 1700000000, body)
    upper = "sha256=" + sig.removeprefix("sha256=").upper()
    for bad in (upper, "sha256=" + "é" * 64):
        result = verify(SECRET, _headers(1700000000, bad), body, 1700000000)
        assert result.outcome is VerifyOutcome.SIGNATURE_INVALID


# -- secrets ----------------------------------------------------------------------------


@pytest.mark.parametrize("vector", SECRET_REJECTIONS, ids=_ids(SECRET_REJECTIONS))
def test_weak_secrets_are_refused_at_config_time(vector: dict[str, Any]) -> None:
    with pytest.raises(WeakSecret):
        check_secret(vector["secret"])
    with pytest.raises(ValueError, match="secret"):
        WebhookConfig(id="w", url="https://example.com/hook", secret=vector["secret"])


@pytest.mark.parametrize("secret", ["ab" * 16, "1234" * 8, "\x00" * 32])
def test_short_repeated_patterns_are_refused(secret: str) -> None:
    with pytest.raises(WeakSecret):
        check_secret(secret)


def test_the_vector_secret_is_strong_enough() -> None:
    check_secret(SECRET)
    hook = WebhookConfig(id="w", url="https://example.com/hook", secret=SECRET)
    assert SECRET not in repr(hook)
    assert hook.secret.get_secret_value() == SECRET


# -- the webhooks file ------------------------------------------------------------------


def _resolver(table: dict[str, list[str]]) -> Any:
    def resolve(host: str, port: int, **_kw: Any) -> list[tuple[Any, ...]]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown host")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in table[host]
        ]

    return resolve


GOOD_FILE = f"""
allow_networks: [loopback]
webhooks:
  - id: desk-1
    url: https://hooks.example.com/warden
    secret: "{SECRET}"
    events: [approved, denied]
    operation_id: op_42
  - id: local.dev
    url: http://127.0.0.1:9000/hook
    secret: "{SECRET}"
"""


def test_parse_a_good_file() -> None:
    resolver = _resolver({"hooks.example.com": ["93.184.216.34"]})
    parsed = parse_webhooks(GOOD_FILE, resolver=resolver)
    assert [w.id for w in parsed.webhooks] == ["desk-1", "local.dev"]
    assert parsed.allow == {"loopback"}
    first = parsed.webhooks[0]
    assert first.wants("approved") and not first.wants("voted")
    assert parsed.webhooks[1].wants("voted")
    assert parsed.get("desk-1") is first and parsed.get("nope") is None


def test_load_webhooks_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.yaml"
    path.write_text(GOOD_FILE, encoding="utf-8")
    parsed = load_webhooks(path, resolver=_resolver({"hooks.example.com": ["93.184.216.34"]}))
    assert len(parsed.webhooks) == 2
    with pytest.raises(ConfigError, match="cannot read"):
        load_webhooks(tmp_path / "missing.yaml")


def test_every_problem_is_reported_at_once_and_secrets_never_shown() -> None:
    text = f"""
allow_networks: [loopback, everything]
extra: 1
webhooks:
  - id: a
    url: https://hooks.example.com/x
    secret: "{SECRET}"
  - id: a
    url: https://internal.example.com/x
    secret: "{SECRET}"
  - id: "bad id!"
    url: ftp://example.com/x
    secret: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    events: [approved, exploded]
    colour: red
  - id: c
    url: http://10.0.0.1/x
    secret: "{SECRET}"
"""
    resolver = _resolver({"hooks.example.com": ["93.184.216.34"], "internal.example.com": []})
    with pytest.raises(ConfigError) as info:
        parse_webhooks(text, source="hooks.yaml", resolver=resolver)
    problems = info.value.data["problems"]
    joined = "\n".join(problems)
    for needle in (
        "unknown fields: extra",
        "allow_networks",
        "webhook #3 (bad id!): id",
        "webhook #3 (bad id!): url",
        "webhook #3 (bad id!): secret",
        "webhook #3 (bad id!): events",
        "webhook #3 (bad id!): colour",
        "webhook #2 (a): url: webhook host 'internal.example.com' resolved to no address",
        "webhook #4 (c): url",
        "duplicate webhook ids: a",
    ):
        assert needle in joined, needle
    assert SECRET not in str(info.value) and "aaaaaaaa" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("webhooks:\n  - id: a\n    id: b\n", "duplicate key"),
        ("[1, 2]", "must be a YAML mapping"),
        ("webhooks: {a: 1}", "must be a list"),
        ("webhooks: [\n", "not valid YAML"),
    ],
)
def test_malformed_files_are_refused(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_webhooks(text)


def test_webhooks_file_model_refuses_duplicate_ids() -> None:
    hook = WebhookConfig(id="a", url="https://example.com/", secret=SECRET)
    with pytest.raises(ValueError, match="duplicate webhook ids"):
        WebhooksFile(webhooks=(hook, hook))


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/", "https://user:pw@example.com/", "https:///nohost", "http://x:99999/"],
)
def test_webhook_url_must_be_plain_http(url: str) -> None:
    with pytest.raises(ValueError, match="url"):
        WebhookConfig(id="a", url=url, secret=SECRET)


def test_empty_event_filter_is_refused() -> None:
    with pytest.raises(ValueError, match="events"):
        WebhookConfig(id="a", url="https://example.com/", secret=SECRET, events=())
