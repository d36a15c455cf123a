"""Every AdCP RFC 9421 conformance vector in the shared folders, byte for byte.

Parametrized over the files (``positive/``, ``negative/`` and ``profile-3.2/…`` of
``request-signing``, and ``webhook-signing``), so a vector added there is picked up.
Nothing is skipped: a vector whose harness state this file cannot install fails.

- Positive: the verifier accepts, and the signature base Warden computes equals the
  vector's ``expected_signature_base`` byte for byte (where given). Ed25519 vectors are
  also re-signed with the published private key and must reproduce the ``Signature``
  bytes exactly (ECDSA is randomized, so ES256 vectors are checked by verifying).
- Negative: the verifier refuses with exactly ``expected_outcome.error_code``.

The replay cache is Warden's own (``adcp_signature_nonces`` on SQLite), with the
vectors' preloaded entries inserted into it; the per-keyid cap of vectors 020/018 is
reached by filling the cache to a small configured cap, as the README allows.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rfc9421_vectors import (
    REQUEST_DIR,
    VECTORS,
    WEBHOOK_DIR,
    HarnessState,
    jwks_for,
    keys_of,
    load,
    profile_for,
    vector_files,
    vector_id,
)

from warden.adcp.request_signing import decide
from warden.adcp.rfc9421 import (
    REQUEST_PROFILE_31,
    REQUEST_PROFILE_32,
    HttpRequest,
    SignatureRejected,
    verify_request,
)
from warden.adcp.rfc9421.fields import parse_dictionary, serialize_member
from warden.adcp.rfc9421.keys import private_key, sign
from warden.adcp.rfc9421.sign import sign_request
from warden.adcp.rfc9421.target import TargetUriMalformed, canonicalize
from warden.adcp.rfc9421.verify import REQUEST_TAG, content_digest, signature_base
from warden.identity.api_keys import Identity, Role
from warden.store import open_store
from warden.store.rfc9421_sql import SqlNonces
from warden.store.sql import SqlStore

FILES = vector_files(REQUEST_DIR) + vector_files(WEBHOOK_DIR)
CAP = 5


def test_the_parametrization_sees_every_vector_file() -> None:
    """Every JSON file in a ``positive``/``negative`` folder, found by an independent
    walk, is a parameter of :func:`test_vector` (a vector silently not collected would be
    a vector not run); at least the 42 + 29 of compliance 3.2.0-beta.0 are there, and a
    file added later is picked up, not refused."""
    walked = set()
    for root in (REQUEST_DIR, WEBHOOK_DIR):
        for folder, _dirs, files in os.walk(root):
            if Path(folder).name in ("positive", "negative"):
                walked |= {str(Path(folder, f).relative_to(VECTORS)) for f in files}
    names = {vector_id(p) for p in FILES}
    assert names == walked
    assert len([n for n in names if n.startswith("request-signing/")]) >= 42
    assert len([n for n in names if n.startswith("webhook-signing/")]) >= 29


class StoreReplay:
    """The harness's replay half: Warden's SQL replay cache with a configured cap."""

    def __init__(self, store: SqlStore, cap: int) -> None:
        self.store = store
        self.cap = cap

    def cap_reached(self, keyid: str, now: int) -> bool:
        with self.store.transaction() as tx:
            return SqlNonces(tx.cursor, self.store._q).live(keyid, now, self.cap) >= self.cap

    def remember(self, keyid: str, nonce: str, until: int, now: int = 0) -> bool:
        with self.store.transaction() as tx:
            return SqlNonces(tx.cursor, self.store._q).remember(keyid, nonce, until, now)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlStore]:
    s = open_store(f"sqlite:///{tmp_path_factory.mktemp('rfc9421') / 'w.db'}")
    yield s
    s.close()


def _harness(path: Path, vec: dict[str, Any], store: SqlStore) -> HarnessState:
    with store.transaction() as tx:
        tx.cursor.execute("DELETE FROM adcp_signature_nonces")
    replay = StoreReplay(store, CAP)
    state = HarnessState(jwks_for(path, vec), replay=replay)
    setup = vec.get("test_harness_state") or {}
    known = {
        "$comment",
        "replay_cache_entries",
        "replay_cache_per_keyid_cap_hit",
        "revocation_list",
        "revoked_kids",
        "per_keyid_cap_filled_for",
        "revocation_list_stale_seconds",
    }
    unknown = set(setup) - known
    assert not unknown, f"harness state this test cannot install: {unknown}"
    now = int(vec["reference_now"])
    for entry in setup.get("replay_cache_entries", []):
        ttl = int(entry.get("ttl_seconds", 360))
        assert replay.remember(entry["keyid"], entry["nonce"], now + ttl, now)
    cap_kid = (setup.get("replay_cache_per_keyid_cap_hit") or {}).get("keyid") or setup.get(
        "per_keyid_cap_filled_for"
    )
    if cap_kid:
        for i in range(CAP):
            assert replay.remember(cap_kid, f"placeholder-{i}", now + 300, now)
    revocation = setup.get("revocation_list") or {}
    state.revoked |= set(revocation.get("revoked_kids", [])) | set(setup.get("revoked_kids", []))
    if "revocation_list_stale_seconds" in setup:
        state.stale = True
    return state


def _request(vec: dict[str, Any]) -> HttpRequest:
    r = vec["request"]
    return HttpRequest.of(r["method"], r["url"], r["headers"], r["body"])


@pytest.mark.parametrize("path", FILES, ids=vector_id)
def test_vector(path: Path, store: SqlStore) -> None:
    vec = load(path)
    profile = profile_for(path, vec)
    state = _harness(path, vec, store)
    req = _request(vec)
    outcome = vec["expected_outcome"]
    required = _required(path, vec)
    now = int(vec["reference_now"])
    if outcome["success"]:
        verified = verify_request(req, profile, state, now, required=required)
        assert verified is not None
        if "expected_signature_base" in vec:
            assert verified.base == vec["expected_signature_base"]
        # the nonce is now in the durable cache: the same request again is a replay
        with pytest.raises(SignatureRejected) as again:
            verify_request(req, profile, state, now, required=required)
        assert again.value.code == f"{profile.prefix}_replayed"
    else:
        with pytest.raises(SignatureRejected) as exc:
            verify_request(req, profile, state, now, required=required)
        assert exc.value.code == outcome["error_code"], exc.value.message


def _required(path: Path, vec: dict[str, Any]) -> bool:
    """Whether the vector's operation is in the advertised ``required_for`` (by the last
    URL path segment) or ``protocol_methods_required_for`` (by the JSON-RPC method), or
    registers a webhook with ``authentication`` (027)."""
    cap = vec.get("verifier_capability") or {}
    url = vec["request"]["url"].split("?", 1)[0]
    operation = url.rstrip("/").rsplit("/", 1)[-1]
    if operation in (cap.get("required_for") or []):
        return True
    try:
        body = json.loads(vec["request"]["body"] or "null")
    except ValueError:
        body = None
    if isinstance(body, dict):
        if body.get("method") in (cap.get("protocol_methods_required_for") or []):
            return True
        push = body.get("push_notification_config")
        if isinstance(push, dict) and "authentication" in push and cap.get("supported"):
            return True
    return False


SIGNED_POSITIVE = [
    p for p in FILES if p.parent.name == "positive" and "expected_signature_base" in load(p)
]


@pytest.mark.parametrize("path", SIGNED_POSITIVE, ids=vector_id)
def test_signer_reproduces_the_signature(path: Path) -> None:
    """Warden's base is the vector's, and for Ed25519 (deterministic) signing it with the
    published private key gives the vector's ``Signature`` bytes exactly."""
    vec = load(path)
    root = WEBHOOK_DIR if WEBHOOK_DIR in path.parents else REQUEST_DIR
    req = _request(vec)
    profile = profile_for(path, vec)
    si = parse_dictionary(req.field_lines("signature-input")[0], legacy=False, binary=False)
    member = si["sig1"]
    covered = [c for c, _ in member[0]]
    base = signature_base(req, canonicalize(req.url), covered, serialize_member(member))
    assert base == vec["expected_signature_base"]
    params = member[1]
    if params["alg"] != "ed25519":
        return
    key = private_key(keys_of(root)[params["keyid"]], "_private_d_for_test_only")
    raw = sign(key, "ed25519", base.encode())
    sig = parse_dictionary(
        req.field_lines("signature")[0], legacy=profile.legacy_binary, binary=True
    )
    assert sig["sig1"][0] == raw
    text = req.field_lines("signature")[0]
    if profile.legacy_binary:
        assert base64.urlsafe_b64encode(raw).rstrip(b"=").decode() in text
    else:
        assert base64.b64encode(raw).decode() in text


CANON = load(REQUEST_DIR / "canonicalization.json")["cases"]


@pytest.mark.parametrize("case", CANON, ids=lambda c: c["name"])
def test_canonicalization(case: dict[str, Any]) -> None:
    """``canonicalization.json``: signer-side canonicalization (a U-label is converted)."""
    if case.get("reject"):
        with pytest.raises(TargetUriMalformed):
            canonicalize(case["input_url"], allow_unicode_host=True)
        assert case["expected_error_code"] == "request_target_uri_malformed"
        return
    target = canonicalize(case["input_url"], allow_unicode_host=True)
    assert target.target_uri == case["expected_target_uri"]
    assert target.authority == case["expected_authority"]


# -- body-integrity-policy.json ---------------------------------------------------------

POLICY = load(REQUEST_DIR / "body-integrity-policy.json")


class MemoryReplay:
    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def cap_reached(self, keyid: str, now: int) -> bool:
        return False

    def remember(self, keyid: str, nonce: str, until: int) -> bool:
        if (keyid, nonce) in self.seen:
            return False
        self.seen.add((keyid, nonce))
        return True


def _policy_request(case: dict[str, Any], legacy: bool, now: int) -> HttpRequest:
    """A real request with the case's facts: body or none, signed or not (or only a
    ``Signature`` header), ``content-digest`` covered or not, matching the body or not,
    the signature valid or one byte off."""
    body = b""
    headers: list[tuple[str, str]] = []
    if case["has_body"]:
        doc: dict[str, Any] = {"plan_id": "plan_001"}
        if "request_body_adcp_version" in case:
            doc["adcp_version"] = case["request_body_adcp_version"]
        body = json.dumps(doc, separators=(",", ":")).encode()
        headers.append(("Content-Type", "application/json"))
    req = HttpRequest(
        "POST", "https://seller.example.com/adcp/create_media_buy", tuple(headers), body
    )
    if not case["signature_present"]:
        return req
    jwk = keys_of(REQUEST_DIR)["test-ed25519-2026"]
    key = private_key(jwk, "_private_d_for_test_only")
    covered = ["@method", "@target-uri", "@authority"]
    if body:
        covered.append("content-type")
    if case.get("covers_content_digest"):
        covered.append("content-digest")
        digest_of = body if case.get("digest_matches_body", True) else body + b" "
        req = HttpRequest(
            req.method, req.url, (*req.headers, ("Content-Digest", content_digest(digest_of))), body
        )
    signed = sign_request(
        req, key, "test-ed25519-2026", alg="ed25519", tag=REQUEST_TAG, created=now,
        covered=covered, legacy_binary=legacy,
    )  # fmt: skip
    out = list(signed.headers)
    if case.get("cryptographic_signature_valid", True) is False:
        name, value = out[-1]
        cut = value.index(":") + 3
        out[-1] = (name, value[:cut] + ("B" if value[cut] == "A" else "A") + value[cut + 1 :])
    if case.get("signature_header_state") == "malformed_pair":
        out = [h for h in out if h[0] != "Signature-Input"]
    return HttpRequest(signed.method, signed.url, tuple(out), signed.body)


@pytest.mark.parametrize("case", POLICY["cases"], ids=lambda c: c["id"])
def test_body_integrity_policy(case: dict[str, Any]) -> None:
    """Each case of ``body-integrity-policy.json`` as a real signed request through the
    checklist and :func:`~warden.adcp.request_signing.decide`."""
    if case["endpoint_profile"] == "3.2":
        profile = REQUEST_PROFILE_32
    else:
        profile = REQUEST_PROFILE_31.with_digest(case.get("legacy_digest_policy", "either"))
    now = 1776520800
    req = _policy_request(case, profile.legacy_binary, now)
    jwks = {
        "test-ed25519-2026": jwks_for(REQUEST_DIR / "x", {"jwks_ref": ["test-ed25519-2026"]})[
            "test-ed25519-2026"
        ]
    }
    state = HarnessState(jwks, replay=MemoryReplay())
    bearer = Identity("k1", "buyer", Role.AGENT, ())
    outcome = decide(
        case["mode"],
        lambda: verify_request(req, profile, state, now),
        lambda: bearer if case["fallback_auth_valid"] else None,
    )
    want = case["expected"]
    assert outcome.action == want["action"]
    assert outcome.error_code == want.get("error_code")
    if "authentication_source" in want:
        assert outcome.source == want["authentication_source"]
    assert (outcome.verified is not None) == want["verified_signer_identity"]
