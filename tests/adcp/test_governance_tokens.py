"""AdCP ``governance_context`` tokens (specs/adcp-spend-kla.md §1.7): every case of the
vendored ``governance-authorization.json`` and ``plan-hash/`` vectors, then round trips
through Warden's own key, tampered one way at a time, each refused at its step."""

from __future__ import annotations

import base64
import json
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from warden.adcp.governance_token import (
    GOVERNANCE_KEY_FILENAME,
    Commitment,
    GovernanceSigner,
    PolicyDecision,
    load_governance_signer,
    new_jti,
    sign_compact,
)
from warden.adcp.plan_hash import (
    authorized_payload_hash,
    payload_preimage,
    plan_hash,
    plan_preimage,
)
from warden.adcp.token_verifier import (
    GovernanceErrorCode,
    GovernanceTokenRejected,
    GovernanceTokenVerifier,
    InMemoryJtiReplayStore,
    JwksUnavailable,
    RevocationList,
    StaticJwks,
    VerificationStep,
    VerifiedGovernanceToken,
)
from warden.errors import ConfigError, InvalidRequest

# Paths computed here, not imported from tests/conftest.py: a conftest.py added to
# tests/adcp/ later would shadow that module name.
TESTS = Path(__file__).resolve().parent.parent
SHARED = TESTS.parent.parent / "shared"


def asset(name: str) -> Path:
    path = TESTS / "assets" / name
    assert path.exists(), f"missing test asset {name}"
    return path


Step = VerificationStep
Code = GovernanceErrorCode

VECTOR_ASSET = "adcp/governance-authorization.json"
SHARED_VECTORS = SHARED / "specs/files/adcp/compliance-3.2.0-beta.0/test-vectors"
DOC: dict[str, Any] = json.loads(asset(VECTOR_ASSET).read_text(encoding="utf-8"))
JWS = DOC["signed_jws"]
DEFAULTS: dict[str, Any] = JWS["verification_defaults"]
CASES: list[dict[str, Any]] = JWS["cases"]
PLAN_VECTORS = sorted(asset("adcp/plan-hash").glob("*.json"))

# Where each compact-JWS case must fail in Warden's verifier (a new case fails
# test_step_table_is_complete). The error codes come from the vector file itself.
EXPECTED_STEP: dict[str, Step | None] = {
    "valid-exact-authorization": None,
    "unknown-critical-header": Step.CRITICAL,
    "claim-missing-critical-marker": Step.CRITICAL,
    "critical-marker-missing-claim": Step.CRITICAL,
    "audience-missing": Step.PARSE,
    "audience-mismatch": Step.AUDIENCE,
    "authenticated-caller-missing": Step.PARSE,
    "authenticated-caller-mismatch": Step.AUDIENCE,
    "authorized-task-missing": Step.CRITICAL,
    "authorized-task-mismatch": Step.ACTION_BINDING,
    "authorized-payload-hash-missing": Step.CRITICAL,
    "authorized-payload-hash-mismatch": Step.ACTION_BINDING,
    "authorized-commitment-missing": Step.ACTION_BINDING,
    "authorized-currency-missing": Step.PARSE,
    "authorized-currency-mismatch": Step.ACTION_BINDING,
    "authorized-amount-missing": Step.PARSE,
    "actual-amount-widens-ceiling": Step.ACTION_BINDING,
    "issued-at-in-future": Step.TIME,
    "not-before-in-future": Step.TIME,
    "expiration-missing": Step.PARSE,
    "token-expired": Step.TIME,
    "jti-missing": Step.PARSE,
    "jti-empty": Step.PARSE,
    "jti-replayed": Step.REPLAY,
    "signature-tampered": Step.SIGNATURE,
    "zero-cost-commitment": None,
    "zero-cost-ceiling-widened": Step.ACTION_BINDING,
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _vector_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(_unb64(JWS["test_key"]["_private_d_for_test_only"]))


def _vector_public_jwk() -> dict[str, Any]:
    return {
        k: v
        for k, v in JWS["test_key"].items()
        if k not in ("$comment", "_private_d_for_test_only")
    }


class CountingJwks(StaticJwks):
    """StaticJwks that records each resolve (to see the one refresh on an unknown kid)."""

    def __init__(self, jwks_by_issuer: Mapping[str, Mapping[str, Any]]) -> None:
        super().__init__(jwks_by_issuer)
        self.calls: list[tuple[str, bool]] = []

    def resolve(self, issuer: str, *, refresh: bool = False) -> Mapping[str, Any]:
        self.calls.append((issuer, refresh))
        return super().resolve(issuer, refresh=refresh)


def _vector_verifier(
    jwk: Mapping[str, Any] | None = None, store: InMemoryJtiReplayStore | None = None
) -> GovernanceTokenVerifier:
    return GovernanceTokenVerifier(
        audience=DEFAULTS["expected_audience"],
        jwks=StaticJwks({DEFAULTS["expected_issuer"]: {"keys": [jwk or _vector_public_jwk()]}}),
        replay_store=store or InMemoryJtiReplayStore(),
        clock=lambda: DEFAULTS["now"],
        clock_skew_seconds=DEFAULTS["clock_skew_seconds"],
    )


def _verify_vector(
    verifier: GovernanceTokenVerifier, token: str, overrides: Mapping[str, Any] | None = None
) -> VerifiedGovernanceToken:
    ctx = {**DEFAULTS, **(overrides or {})}
    return verifier.verify(
        token,
        caller=ctx["authenticated_caller"],
        task=ctx["expected_task"],
        payload=ctx["payload"],
        commitment=ctx["actual_commitment"],
        buyer_issuers=[ctx["expected_issuer"]],
        phase=ctx["expected_phase"],
    )


def _rejected(fn: Callable[[], object]) -> GovernanceTokenRejected:
    with pytest.raises(GovernanceTokenRejected) as info:
        fn()
    return info.value


# -- the vendored copies -----------------------------------------------------------


def test_vendored_copies_equal_the_shared_originals() -> None:
    if not SHARED_VECTORS.exists():
        pytest.skip("../shared is not present")
    assert (
        asset(VECTOR_ASSET).read_bytes()
        == (SHARED_VECTORS / "governance-authorization.json").read_bytes()
    )
    originals = sorted((SHARED_VECTORS / "plan-hash").glob("*.json"))
    assert [p.name for p in PLAN_VECTORS] == [p.name for p in originals]
    for copy, original in zip(PLAN_VECTORS, originals, strict=True):
        assert copy.read_bytes() == original.read_bytes()


def test_step_table_is_complete() -> None:
    assert set(EXPECTED_STEP) == {c["id"] for c in CASES}
    assert len(CASES) == 27 and len(DOC["payload_hash_cases"]) == 3
    assert len(DOC["authorization_cases"]) == 7 and len(PLAN_VECTORS) == 11


# -- payload hash and plan hash vectors ----------------------------------------------


@pytest.mark.parametrize("case", DOC["payload_hash_cases"], ids=lambda c: c["id"])
def test_payload_hash_vector(case: dict[str, Any]) -> None:
    assert payload_preimage(case["payload"]) == case["canonical_business_payload"].encode()
    assert authorized_payload_hash(case["payload"]) == case["expected_hash"]


@pytest.mark.parametrize("path", PLAN_VECTORS, ids=lambda p: p.stem)
def test_plan_hash_vector(path: Path) -> None:
    vector = json.loads(path.read_text(encoding="utf-8"))
    plan, expected = vector["plan_as_supplied"], vector["expected"]
    assert plan_preimage(plan) == expected["jcs_bytes"].encode("utf-8")
    assert plan_preimage(expected["preimage"]) == expected["jcs_bytes"].encode("utf-8")
    assert plan_hash(plan) == expected["plan_hash"]
    assert _unb64(plan_hash(plan)).hex() == expected["sha256_hex"]


def test_plan_hash_cross_references() -> None:
    by_stem = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in PLAN_VECTORS}
    checked = 0
    for stem, vector in by_stem.items():
        ref = vector.get("cross_reference", {})
        mine = plan_hash(vector["plan_as_supplied"])
        if "same_hash_as" in ref:
            assert mine == plan_hash(by_stem[ref["same_hash_as"]]["plan_as_supplied"]), stem
            checked += 1
        if "differs_from" in ref:
            assert mine != plan_hash(by_stem[ref["differs_from"]]["plan_as_supplied"]), stem
            checked += 1
    assert checked == 4  # 003 same as 001; 004b, 005b, 006b differ from their pairs


def test_hashes_refuse_values_outside_jcs() -> None:
    with pytest.raises(InvalidRequest):
        plan_hash({"plan_id": "p", "budget": {"total": float("nan")}})
    with pytest.raises(InvalidRequest):
        authorized_payload_hash({"amount": 2**60})
    with pytest.raises(InvalidRequest):
        authorized_payload_hash(["not", "an", "object"])  # type: ignore[arg-type]


# -- the compact-JWS vectors: signing -------------------------------------------------


def test_vector_key_is_the_published_public_key() -> None:
    signer = GovernanceSigner(_vector_key(), JWS["test_key"]["kid"], DEFAULTS["expected_issuer"])
    assert signer.public_jwk() == _vector_public_jwk()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_vector_signing_reproduces_bytes(case: dict[str, Any]) -> None:
    token = sign_compact(_vector_key(), case["protected_header"], case["claims"])
    if case["id"] == "signature-tampered":
        # Same signing input; the vector's signature was altered after signing.
        assert token.rsplit(".", 1)[0] == case["compact_jws"].rsplit(".", 1)[0]
        assert token != case["compact_jws"]
    else:
        assert token == case["compact_jws"]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["expected"]["result"] == "accept"], ids=lambda c: c["id"]
)
def test_issue_reproduces_accepted_vectors(case: dict[str, Any]) -> None:
    claims = case["claims"]
    signer = GovernanceSigner(_vector_key(), case["protected_header"]["kid"], claims["iss"])
    token = signer.issue(
        sub=claims["sub"],
        aud=claims["aud"],
        caller=claims["caller"],
        check_id=claims["check_id"],
        plan_hash=claims["plan_hash"],
        phase=claims["phase"],
        now=claims["iat"],
        nbf=claims["nbf"],
        exp=claims["exp"],
        jti=claims["jti"],
        authorized_commitment=Commitment(**claims["authorized_commitment"]),
        authorized_task=claims["authorized_task"],
        authorized_payload_hash=claims["authorized_payload_hash"],
    )
    assert token == case["compact_jws"]


# -- the compact-JWS vectors: verifying ------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_vector_verification(case: dict[str, Any]) -> None:
    overrides = dict(case.get("verification_overrides", {}))
    store = InMemoryJtiReplayStore()
    if overrides.pop("preconsumed_jti", False):
        claims = case["claims"]
        assert store.consume(
            issuer=claims["iss"],
            audience=claims["aud"],
            jti=claims["jti"],
            expires_at=claims["exp"] + 60,
            now=DEFAULTS["now"],
        )
    verifier = _vector_verifier(store=store)
    expected = case["expected"]
    if expected["result"] == "accept":
        verified = _verify_vector(verifier, case["compact_jws"], overrides)
        assert verified.claims == case["claims"]
        assert verified.header == case["protected_header"]
        # Accepting consumed the jti: the same token is now a replay.
        again = _rejected(lambda: _verify_vector(verifier, case["compact_jws"], overrides))
        assert (again.step, again.code) == (Step.REPLAY, Code.TOKEN_REPLAYED)
        return
    err = _rejected(lambda: _verify_vector(verifier, case["compact_jws"], overrides))
    assert err.code == expected["error"]
    assert err.reason == expected["error"]
    assert err.step == EXPECTED_STEP[case["id"]]
    if err.step != Step.REPLAY:
        assert len(store) == 0, "a refused token must not consume its jti"


@pytest.mark.parametrize("case", DOC["authorization_cases"], ids=lambda c: c["id"])
def test_abstract_authorization_case(case: dict[str, Any]) -> None:
    """Each abstract case, made concrete: a token signed with the vector key whose
    bindings match or miss the seller's request as the case says."""
    payload = {"idempotency_key": f"abstract-{case['id']}", "amount": case["actual_amount"]}
    claims: dict[str, Any] = {
        "iss": DEFAULTS["expected_issuer"],
        "sub": f"sub_{case['id']}",
        "plan_hash": "oR0jFDEtzcwgPbNf-Ofd_fZHYfAyD1TRbzGOFBVCG-c",
        "aud": DEFAULTS["expected_audience"],
        "iat": DEFAULTS["now"],
        "exp": DEFAULTS["now"] + 900,
        "jti": f"jti_{case['id']}",
        "phase": "intent",
        "caller": DEFAULTS["authenticated_caller"],
        "check_id": "chk_abstract",
        "authorized_commitment": {
            "amount": case["authorized_amount"],
            "currency": "USD" if case["currency_match"] else "EUR",
        },
        "authorized_task": DEFAULTS["expected_task"] if case["task_match"] else "update_media_buy",
        "authorized_payload_hash": authorized_payload_hash(
            payload if case["payload_hash_match"] else {**payload, "amount": -1}
        ),
    }
    crit = ["authorized_commitment", "authorized_task", "authorized_payload_hash"]
    header: dict[str, Any] = {"alg": "EdDSA", "kid": "test-gov-2026", "typ": "adcp-gov+jws"}
    if not case["critical_markers_complete"]:
        crit = crit[1:]  # the commitment claim stays, its marker and crit entry go
    header["crit"] = crit
    header.update({name: True for name in crit})
    token = sign_compact(_vector_key(), header, claims)
    overrides = {
        "payload": payload,
        "actual_commitment": {"amount": case["actual_amount"], "currency": "USD"},
    }
    verifier = _vector_verifier()
    if case["expected"] == "accept":
        assert _verify_vector(verifier, token, overrides).jti == claims["jti"]
        return
    err = _rejected(lambda: _verify_vector(verifier, token, overrides))
    if case["critical_markers_complete"]:
        assert (err.step, err.code) == (Step.ACTION_BINDING, Code.TOKEN_NOT_APPLICABLE)
    else:
        assert (err.step, err.code) == (Step.CRITICAL, Code.TOKEN_INVALID)


# -- Warden's own key: storage and the published JWKS ----------------------------------

ISSUER = "https://warden.example/governance"
SELLER = "https://seller.example/mcp"
BUYER = "https://buyer.example/agent"
NOW = 1_800_000_000
PAYLOAD: dict[str, Any] = {
    "idempotency_key": "buy-0001-abcdefghijkl",
    "account": {"account_id": "acc_1"},
    "total_budget": {"amount": 1500.5, "currency": "USD"},
    "context": {"correlation_id": "not hashed"},
}


def test_key_is_created_once_with_mode_0600_and_a_stable_kid(tmp_path: Path) -> None:
    first = load_governance_signer(tmp_path / "data", ISSUER)
    path = tmp_path / "data" / GOVERNANCE_KEY_FILENAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_governance_signer(tmp_path / "data", ISSUER)
    assert again.kid == first.kid and again.jwks() == first.jwks()
    assert len(first.kid) == 16 and int(first.kid, 16) >= 0
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="group/others"):
        load_governance_signer(tmp_path / "data", ISSUER)


def test_jwks_verifies_warden_tokens_independently(tmp_path: Path) -> None:
    """The published JWK alone (through `cryptography`, not joserfc) checks the signature."""
    signer = load_governance_signer(tmp_path, ISSUER)
    jwks = signer.jwks()
    assert set(jwks) == {"keys"} and len(jwks["keys"]) == 1
    jwk = jwks["keys"][0]
    assert jwk == {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": jwk["x"],
        "kid": signer.kid,
        "alg": "EdDSA",
        "use": "sig",
        "key_ops": ["verify"],
        "adcp_use": "governance-signing",
    }
    token = _issue(signer)
    head, body, sig = token.split(".")
    public = Ed25519PublicKey.from_public_bytes(_unb64(jwk["x"]))
    public.verify(_unb64(sig), f"{head}.{body}".encode())
    with pytest.raises(InvalidSignature):
        public.verify(_unb64(sig), f"{head}.{body}x".encode())
    assert json.loads(_unb64(head)) == {
        "alg": "EdDSA",
        "kid": signer.kid,
        "typ": "adcp-gov+jws",
        "crit": ["authorized_commitment", "authorized_task", "authorized_payload_hash"],
        "authorized_commitment": True,
        "authorized_task": True,
        "authorized_payload_hash": True,
    }
    claims = json.loads(_unb64(body))
    assert list(claims) == [
        "iss", "sub", "plan_hash", "aud", "iat", "exp", "jti", "phase", "caller",
        "check_id", "authorized_commitment", "authorized_task", "authorized_payload_hash",
        "policy_decisions",
    ]  # fmt: skip
    assert claims["exp"] - claims["iat"] == 900
    assert claims["authorized_commitment"] == {"amount": 1500.5, "currency": "USD"}
    assert claims["policy_decisions"] == [{"policy_id": "budget_cap", "outcome": "pass"}]


# -- round trips ------------------------------------------------------------------


def _issue(signer: GovernanceSigner, **overrides: Any) -> str:
    kw: dict[str, Any] = {
        "sub": "gov_action_0001",
        "aud": SELLER,
        "caller": BUYER,
        "check_id": "chk_0001",
        "plan_hash": plan_hash({"plan_id": "plan_1"}),
        "now": NOW,
        "authorized_commitment": Commitment(1500.5, "USD"),
        "authorized_task": "create_media_buy",
        "authorized_payload_hash": authorized_payload_hash(PAYLOAD),
        "policy_decisions": [PolicyDecision("budget_cap", "pass")],
    }
    kw.update(overrides)
    return signer.issue(**kw)


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> GovernanceSigner:
    return load_governance_signer(tmp_path_factory.mktemp("gov"), ISSUER)


class Seller:
    """One seller's verifier over Warden's JWKS, with a settable clock."""

    def __init__(self, signer: GovernanceSigner, **kw: Any) -> None:
        self.now: float = NOW
        self.store = InMemoryJtiReplayStore()
        self.jwks = kw.pop("jwks", None) or CountingJwks({ISSUER: signer.jwks()})
        self.verifier = GovernanceTokenVerifier(
            audience=SELLER,
            jwks=self.jwks,
            replay_store=self.store,
            clock=lambda: self.now,
            **kw,
        )

    def verify(self, token: str, **overrides: Any) -> VerifiedGovernanceToken:
        kw: dict[str, Any] = {
            "caller": BUYER,
            "task": "create_media_buy",
            "payload": PAYLOAD,
            "commitment": {"amount": 1500.5, "currency": "USD"},
            "buyer_issuers": [ISSUER],
        }
        kw.update(overrides)
        return self.verifier.verify(token, **kw)

    def refuses(self, token: str, step: Step, code: Code, **overrides: Any) -> None:
        err = _rejected(lambda: self.verify(token, **overrides))
        assert (err.step, err.code) == (step, code), err.diagnostics()
        assert err.reason == code.value


def _resign(
    token: str,
    key: Ed25519PrivateKey,
    header: Callable[[dict[str, Any]], None] | None = None,
    claims: Callable[[dict[str, Any]], None] | None = None,
) -> str:
    head, body, _ = token.split(".")
    h, c = json.loads(_unb64(head)), json.loads(_unb64(body))
    if header:
        header(h)
    if claims:
        claims(c)
    return sign_compact(key, h, c)


def test_issue_then_verify(signer: GovernanceSigner) -> None:
    seller = Seller(signer)
    token = _issue(signer)
    verified = seller.verify(token)
    assert (verified.iss, verified.sub, verified.phase, verified.check_id) == (
        ISSUER,
        "gov_action_0001",
        "intent",
        "chk_0001",
    )
    assert seller.jwks.calls == [(ISSUER, False)]
    # A lower actual amount is within the ceiling; the envelope context is not hashed.
    other = _issue(signer)
    seller.verify(
        other,
        commitment={"amount": 10, "currency": "USD"},
        payload={**PAYLOAD, "context": {"correlation_id": "changed"}},
    )


def test_tampered_claims_fail_the_signature(signer: GovernanceSigner) -> None:
    head, body, sig = _issue(signer).split(".")
    claims = json.loads(_unb64(body))
    claims["authorized_commitment"]["amount"] = 999999
    forged = f"{head}.{_b64(json.dumps(claims).encode())}.{sig}"
    Seller(signer).refuses(forged, Step.SIGNATURE, Code.TOKEN_INVALID)


def test_tampered_header_fails_the_signature(signer: GovernanceSigner) -> None:
    head, body, sig = _issue(signer).split(".")
    header = json.loads(_unb64(head))
    header["extra"] = "x"
    forged = f"{_b64(json.dumps(header).encode())}.{body}.{sig}"
    Seller(signer).refuses(forged, Step.SIGNATURE, Code.TOKEN_INVALID)


def test_signed_by_another_key_under_the_same_kid(signer: GovernanceSigner) -> None:
    forged = _resign(_issue(signer), Ed25519PrivateKey.generate())
    Seller(signer).refuses(forged, Step.SIGNATURE, Code.TOKEN_INVALID)


@pytest.mark.parametrize(
    ("token", "step"),
    [
        ("", Step.PARSE),
        ("a.b", Step.PARSE),
        ("a.b.c.d", Step.PARSE),
        ("e30.e30.e30", Step.PARSE),  # {} header and claims: required claims missing
        ("not base64!.e30.sig", Step.PARSE),
        ("x" * 4097, Step.PARSE),
    ],
)
def test_garbage_fails_parsing(signer: GovernanceSigner, token: str, step: Step) -> None:
    Seller(signer).refuses(token, step, Code.TOKEN_INVALID)


def test_duplicate_claim_keys_fail_parsing(signer: GovernanceSigner) -> None:
    head, body, _sig = _issue(signer).split(".")
    doubled = _unb64(body)[:-1] + b',"aud":"https://other.example"}'
    token = f"{head}.{_b64(doubled)}.{_sig}"
    Seller(signer).refuses(token, Step.PARSE, Code.TOKEN_INVALID)


@pytest.mark.parametrize(
    ("edit", "step"),
    [
        (lambda h: h.update(alg="none"), Step.ALGORITHM),
        (lambda h: h.update(alg="HS256"), Step.ALGORITHM),
        (lambda h: h.update(alg="RS256"), Step.ALGORITHM),
        (lambda h: h.pop("alg"), Step.ALGORITHM),
        (lambda h: h.update(typ="JWT"), Step.TYPE),
        (lambda h: h.update(typ="ADCP-GOV+JWS"), Step.TYPE),
        (lambda h: h.pop("typ"), Step.TYPE),
        (lambda h: h.pop("crit"), Step.CRITICAL),
        (lambda h: h.update(crit=[]), Step.CRITICAL),
        (lambda h: h.update(crit="authorized_task"), Step.CRITICAL),
        (lambda h: h["crit"].append("authorized_task"), Step.CRITICAL),
        (lambda h: h.update(authorized_task=False), Step.CRITICAL),
        (lambda h: h.pop("authorized_commitment"), Step.CRITICAL),
        (lambda h: h.update(b64=False), Step.CRITICAL),
        (lambda h: h.pop("kid"), Step.KEY_RESOLUTION),
    ],
    ids=[
        "alg-none", "alg-hs256", "alg-rs256", "alg-missing", "typ-jwt", "typ-case",
        "typ-missing", "crit-missing", "crit-empty", "crit-not-list", "crit-duplicate",
        "marker-false", "marker-missing", "b64", "kid-missing",
    ],
)  # fmt: skip
def test_header_defects_fail_at_their_step(
    signer: GovernanceSigner, edit: Callable[[dict[str, Any]], None], step: Step
) -> None:
    head, body, sig = _issue(signer).split(".")
    header = json.loads(_unb64(head))
    edit(header)
    # Not re-signed (joserfc would refuse most of these): each step comes before step 7.
    forged = f"{_b64(json.dumps(header).encode())}.{body}.{sig}"
    Seller(signer).refuses(forged, step, Code.TOKEN_INVALID)


def test_crit_missing_even_when_correctly_signed(signer: GovernanceSigner) -> None:
    key = signer._key  # noqa: SLF001 — re-sign with Warden's own key
    token = _resign(_issue(signer), key, header=lambda h: h.pop("crit"))
    Seller(signer).refuses(token, Step.CRITICAL, Code.TOKEN_INVALID)


def test_expired_and_not_yet_valid(signer: GovernanceSigner) -> None:
    token = _issue(signer)  # iat NOW, exp NOW + 900
    seller = Seller(signer)
    seller.now = NOW + 900 + 61
    seller.refuses(token, Step.TIME, Code.TOKEN_EXPIRED)
    seller.now = NOW - 61
    seller.refuses(token, Step.TIME, Code.TOKEN_NOT_YET_VALID)
    seller.now = NOW + 900 + 60  # within the skew
    seller.verify(token)


def test_time_claims_that_make_no_sense(signer: GovernanceSigner) -> None:
    key = signer._key  # noqa: SLF001
    backwards = _resign(_issue(signer), key, claims=lambda c: c.update(exp=c["iat"]))
    Seller(signer).refuses(backwards, Step.TIME, Code.TOKEN_INVALID)
    long_lived = _resign(
        _issue(signer, phase="purchase", ttl_seconds=3600),
        key,
        claims=lambda c: c.update(exp=c["iat"] + 31 * 24 * 3600),
    )
    Seller(signer).refuses(long_lived, Step.TIME, Code.TOKEN_INVALID, phase="purchase")


def test_wrong_audience_and_caller(signer: GovernanceSigner) -> None:
    Seller(signer).refuses(
        _issue(signer, aud="https://seller.example/mcp/"), Step.AUDIENCE, Code.TOKEN_NOT_APPLICABLE
    )
    Seller(signer).refuses(
        _issue(signer), Step.AUDIENCE, Code.TOKEN_NOT_APPLICABLE, caller="https://evil.example"
    )


def test_replayed_jti(signer: GovernanceSigner) -> None:
    seller = Seller(signer)
    token = _issue(signer)
    seller.verify(token)
    seller.refuses(token, Step.REPLAY, Code.TOKEN_REPLAYED)
    # The same jti in a token re-issued for another seller is a different tuple.
    other = GovernanceTokenVerifier(
        audience="https://other-seller.example",
        jwks=StaticJwks({ISSUER: signer.jwks()}),
        replay_store=seller.store,
        clock=lambda: NOW,
    )
    jti = json.loads(_unb64(token.split(".")[1]))["jti"]
    other.verify(
        _issue(signer, aud="https://other-seller.example", jti=jti),
        caller=BUYER,
        task="create_media_buy",
        payload=PAYLOAD,
        commitment=None,
        buyer_issuers=[ISSUER],
    )


def test_repeat_allowed_only_for_the_same_in_flight_idempotency_key(
    signer: GovernanceSigner,
) -> None:
    seller = Seller(signer)
    token = _issue(signer)
    key = PAYLOAD["idempotency_key"]
    seller.verify(token, idempotency_key=key)
    seller.verify(token, idempotency_key=key)
    seller.refuses(token, Step.REPLAY, Code.TOKEN_REPLAYED, idempotency_key="another-key-0001")
    seller.refuses(token, Step.REPLAY, Code.TOKEN_REPLAYED)


def test_racing_first_consumptions_let_exactly_one_through() -> None:
    store = InMemoryJtiReplayStore()
    start = threading.Barrier(16)
    results: list[bool] = []

    def consume() -> None:
        start.wait()
        results.append(
            store.consume(issuer=ISSUER, audience=SELLER, jti="race", expires_at=NOW + 60, now=NOW)
        )

    threads = [threading.Thread(target=consume) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 15 + [True]


def test_replay_entry_expires_with_the_token() -> None:
    store = InMemoryJtiReplayStore()
    args = {"issuer": ISSUER, "audience": SELLER, "jti": "j1"}
    assert store.consume(**args, expires_at=NOW + 10, now=NOW)
    assert not store.consume(**args, expires_at=NOW + 10, now=NOW + 5)
    assert store.consume(**args, expires_at=NOW + 30, now=NOW + 11)


def test_a_refused_token_does_not_consume_its_jti(signer: GovernanceSigner) -> None:
    seller = Seller(signer)
    token = _issue(signer)
    seller.refuses(token, Step.ISSUER_AUTHORIZED, Code.ISSUER_NOT_AUTHORIZED, buyer_issuers=[])
    assert len(seller.store) == 0
    seller.verify(token)


def test_unknown_kid_refreshes_once(signer: GovernanceSigner) -> None:
    other = GovernanceSigner(Ed25519PrivateKey.generate(), "rotated-kid", ISSUER)
    seller = Seller(signer)
    seller.refuses(_issue(other), Step.KEY_RESOLUTION, Code.KEY_UNKNOWN)
    assert seller.jwks.calls == [(ISSUER, False), (ISSUER, True)]


def test_unknown_issuer_and_unreachable_jwks(signer: GovernanceSigner) -> None:
    stranger = GovernanceSigner(signer._key, signer.kid, "https://stranger.example")  # noqa: SLF001
    Seller(signer).refuses(_issue(stranger), Step.KEY_RESOLUTION, Code.JWKS_UNTRUSTED)

    class Down:
        def resolve(self, issuer: str, *, refresh: bool = False) -> Mapping[str, Any]:
            raise JwksUnavailable("connection refused")

    Seller(signer, jwks=Down()).refuses(_issue(signer), Step.KEY_RESOLUTION, Code.JWKS_UNAVAILABLE)
    big = {"keys": [signer.public_jwk(), {"kid": "pad", "x": "A" * 70_000}]}
    Seller(signer, jwks=StaticJwks({ISSUER: big})).refuses(
        _issue(signer), Step.KEY_RESOLUTION, Code.JWKS_UNTRUSTED
    )


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda k: k.pop("use"), Code.KEY_UNKNOWN),
        (lambda k: k.update(use="enc"), Code.KEY_UNKNOWN),
        (lambda k: k.update(key_ops=["sign"]), Code.KEY_UNKNOWN),
        (lambda k: k.pop("key_ops"), Code.KEY_UNKNOWN),
        (lambda k: k.update(adcp_use="request-signing"), Code.KEY_UNKNOWN),
        (lambda k: k.update(alg="ES256"), Code.KEY_UNKNOWN),
        (lambda k: k.update(crv="Ed448"), Code.KEY_UNKNOWN),
        (lambda k: k.update(d=k["x"]), Code.JWKS_UNTRUSTED),
    ],
    ids=[
        "no-use",
        "use-enc",
        "ops-sign",
        "no-ops",
        "other-purpose",
        "other-alg",
        "ed448",
        "private",
    ],
)
def test_key_purpose(
    signer: GovernanceSigner, edit: Callable[[dict[str, Any]], None], code: Code
) -> None:
    jwk = signer.public_jwk()
    edit(jwk)
    seller = Seller(signer, jwks=StaticJwks({ISSUER: {"keys": [jwk]}}))
    seller.refuses(_issue(signer), Step.KEY_PURPOSE, code)


def test_subject_and_phase(signer: GovernanceSigner) -> None:
    key = signer._key  # noqa: SLF001
    Seller(signer).refuses(
        _issue(signer), Step.SUBJECT, Code.TOKEN_NOT_APPLICABLE, expected_sub="gov_action_9999"
    )
    empty_sub = _resign(_issue(signer), key, claims=lambda c: c.update(sub=""))
    Seller(signer).refuses(empty_sub, Step.SUBJECT, Code.TOKEN_INVALID)
    Seller(signer).refuses(_issue(signer), Step.PHASE, Code.TOKEN_NOT_APPLICABLE, phase="purchase")


def test_execution_phase_binds_the_media_buy(signer: GovernanceSigner) -> None:
    token = _issue(signer, phase="modification", media_buy_id="mb_1", ttl_seconds=86400)
    Seller(signer).verify(token, phase="modification", media_buy_id="mb_1")
    Seller(signer).refuses(
        token,
        Step.ACTION_BINDING,
        Code.TOKEN_NOT_APPLICABLE,
        phase="modification",
        media_buy_id="mb_2",
    )
    key = signer._key  # noqa: SLF001
    no_buy = _resign(token, key, claims=lambda c: c.pop("media_buy_id"))
    Seller(signer).refuses(no_buy, Step.PARSE, Code.TOKEN_INVALID, phase="modification")


@pytest.mark.parametrize(
    "overrides",
    [
        {"task": "update_media_buy"},
        {"payload": {**PAYLOAD, "idempotency_key": "buy-0002-abcdefghijkl"}},
        {"payload": {k: v for k, v in PAYLOAD.items() if k != "account"}},
        {"commitment": {"amount": 1500.51, "currency": "USD"}},
        {"commitment": {"amount": 1500.5, "currency": "EUR"}},
    ],
    ids=["task", "idempotency-key", "payload", "amount", "currency"],
)
def test_action_bindings(signer: GovernanceSigner, overrides: dict[str, Any]) -> None:
    Seller(signer).refuses(
        _issue(signer), Step.ACTION_BINDING, Code.TOKEN_NOT_APPLICABLE, **overrides
    )


def test_tokens_without_bindings_authorize_no_action(signer: GovernanceSigner) -> None:
    bare = _issue(signer, authorized_task=None, authorized_payload_hash=None)
    Seller(signer).refuses(bare, Step.ACTION_BINDING, Code.TOKEN_NOT_APPLICABLE)
    no_ceiling = _issue(signer, authorized_commitment=None)
    Seller(signer).refuses(no_ceiling, Step.ACTION_BINDING, Code.TOKEN_NOT_APPLICABLE)
    Seller(signer).verify(no_ceiling, commitment=None)  # an action that commits no money


def test_issuer_must_be_the_buyers(signer: GovernanceSigner) -> None:
    Seller(signer).refuses(
        _issue(signer),
        Step.ISSUER_AUTHORIZED,
        Code.ISSUER_NOT_AUTHORIZED,
        buyer_issuers=["https://gov.other.example"],
    )


def test_revocation(signer: GovernanceSigner) -> None:
    token = _issue(signer, jti="jti-revoked-0001")
    lists: dict[str, RevocationList] = {
        ISSUER: RevocationList(revoked_jtis=frozenset({"jti-revoked-0001"}))
    }
    Seller(signer, revocations=lists.get).refuses(token, Step.REVOCATION, Code.TOKEN_REVOKED)
    lists[ISSUER] = RevocationList(revoked_kids=frozenset({signer.kid}))
    Seller(signer, revocations=lists.get).refuses(
        _issue(signer), Step.REVOCATION, Code.TOKEN_REVOKED
    )
    stale = RevocationList(next_update=NOW - 3600, grace_seconds=600)
    lists[ISSUER] = stale
    purchase = _issue(signer, phase="purchase", ttl_seconds=3600)
    Seller(signer, revocations=lists.get).refuses(
        purchase, Step.REVOCATION, Code.REVOCATION_STALE, phase="purchase"
    )
    # A stale list does not block intent tokens.
    Seller(signer, revocations=lists.get).verify(_issue(signer))


def test_issue_refuses_tokens_that_break_the_profile(signer: GovernanceSigner) -> None:
    for bad in (
        {"authorized_payload_hash": None},
        {"authorized_task": None},
        {"sub": ""},
        {"aud": ""},
        {"phase": "checkout"},
        {"media_buy_id": "mb_1"},  # on an intent token
        {"phase": "delivery"},  # without media_buy_id
        {"phase": "purchase", "ttl_seconds": 31 * 24 * 3600},
        {"ttl_seconds": 0},
        {"policy_decision_hash": "ab" * 32},  # as well as policy_decisions
        {"plan_hash": "ab" * 32},  # hex, not base64url
        {"authorized_payload_hash": "not-a-hash"},
        {"authorized_task": ""},
    ):
        with pytest.raises(ValueError):
            _issue(signer, **bad)
    for amount, currency in ((-1, "USD"), (float("inf"), "USD"), (1, "usd")):
        with pytest.raises(ValueError):
            Commitment(amount, currency)
    with pytest.raises(TypeError):
        Commitment(True, "USD")


def test_commitment_decimals_and_jti_format() -> None:
    from decimal import Decimal

    assert Commitment(Decimal("1500.00"), "USD").to_json() == {"amount": 1500, "currency": "USD"}
    assert Commitment(Decimal("0.1"), "USD").to_json()["amount"] == 0.1
    with pytest.raises(ValueError):
        Commitment(Decimal("0.10000000000000000001"), "USD").to_json()
    jtis = {new_jti() for _ in range(100)}
    assert len(jtis) == 100
    assert all(j[14] == "7" and j[19] in "89ab" for j in jtis)  # UUID v7, RFC 9562 variant


def test_seller_commitment_is_checked(signer: GovernanceSigner) -> None:
    with pytest.raises(ValueError, match="commitment"):
        Seller(signer).verify(_issue(signer), commitment={"amount": "12", "currency": "USD"})


def _es256_token(claims: Mapping[str, Any], kid: str, key: Any, alg: str = "ES256") -> str:
    from joserfc import jws

    from warden.adcp._jose import ProfileRegistry

    header: dict[str, Any] = {"alg": alg, "kid": kid, "typ": "adcp-gov+jws"}
    crit = [n for n in ("authorized_commitment", "authorized_task", "authorized_payload_hash")
            if n in claims]  # fmt: skip
    header["crit"] = crit
    header.update({n: True for n in crit})
    return jws.serialize_compact(
        header, json.dumps(claims).encode(), key, registry=ProfileRegistry([alg])
    )


def test_es256_issuers_are_accepted_and_their_keys_checked(signer: GovernanceSigner) -> None:
    from joserfc.jwk import ECKey

    ec = ECKey.generate_key("P-256", private=True)
    public = {**ec.as_dict(private=False), "kid": "ec-1", "use": "sig", "key_ops": ["verify"]}
    claims = json.loads(_unb64(_issue(signer).split(".")[1]))
    token = _es256_token(claims, "ec-1", ec)
    seller = Seller(signer, jwks=StaticJwks({ISSUER: {"keys": [public]}}))
    assert seller.verify(token).header["alg"] == "ES256"
    # The same issuer's EdDSA token under the EC key's kid: the key does not fit the alg.
    mislabeled = _resign(_issue(signer), signer._key, header=lambda h: h.update(kid="ec-1"))  # noqa: SLF001
    seller.refuses(mislabeled, Step.KEY_PURPOSE, Code.KEY_UNKNOWN)
    # A seller that allows EdDSA only refuses ES256 at step 2.
    eddsa_only = Seller(
        signer, jwks=StaticJwks({ISSUER: {"keys": [public]}}), algorithms=("EdDSA",)
    )
    eddsa_only.refuses(token, Step.ALGORITHM, Code.TOKEN_INVALID)
    with pytest.raises(ValueError):
        Seller(signer, algorithms=("HS256",))


def test_unknown_non_critical_header_is_ignored(signer: GovernanceSigner) -> None:
    from joserfc import jws
    from joserfc.jwk import OKPKey

    from warden.adcp._jose import ProfileRegistry

    head, body, _ = _issue(signer).split(".")
    header = {**json.loads(_unb64(head)), "x-trace": "abc"}
    token = jws.serialize_compact(
        header,
        _unb64(body),
        OKPKey.import_key(signer._key),  # noqa: SLF001
        registry=ProfileRegistry(["EdDSA"], strict_check_header=False),
    )
    assert Seller(signer).verify(token).header["x-trace"] == "abc"


def test_buyer_issuers_must_be_a_collection(signer: GovernanceSigner) -> None:
    with pytest.raises(TypeError):
        Seller(signer).verify(_issue(signer), buyer_issuers=ISSUER + "/extra")


def test_module_surfaces_are_pinned() -> None:
    from warden.adcp import governance_token, plan_hash, token_verifier

    assert governance_token.__all__ == [
        "GOVERNANCE_KEY_FILENAME",
        "GOVERNANCE_TYP",
        "MAX_EXECUTION_TTL_SECONDS",
        "MAX_INTENT_TTL_SECONDS",
        "Commitment",
        "GovernancePhase",
        "GovernanceSigner",
        "PolicyDecision",
        "authorized_payload_hash",
        "load_governance_signer",
        "new_jti",
        "plan_hash",
        "sign_compact",
    ]
    assert token_verifier.__all__ == [
        "ALLOWED_ALGORITHMS",
        "GovernanceErrorCode",
        "GovernanceTokenRejected",
        "GovernanceTokenVerifier",
        "InMemoryJtiReplayStore",
        "JtiReplayStore",
        "JwksResolver",
        "JwksUnavailable",
        "JwksUntrusted",
        "RevocationList",
        "StaticJwks",
        "VerificationStep",
        "VerifiedGovernanceToken",
    ]
    # The verifier shares no code with the signer (STYLE.md practice 7).
    source = Path(token_verifier.__file__).read_text(encoding="utf-8")
    assert "from warden.adcp.governance_token" not in source
    assert "import governance_token" not in source
    assert governance_token.plan_hash is plan_hash.plan_hash
