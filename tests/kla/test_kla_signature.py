"""Detached Ed25519 signatures over the 32 digest bytes, and the key registry (seed 004 §05)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, asset
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from warden.errors import ConfigError, InvalidRequest
from warden.kla import (
    KeyRegistry,
    UnknownKeyId,
    VerifyStatus,
    record_digest,
    sign_digest,
    verify_record,
    verify_signature,
)
from warden.kla.digest import digest_bytes
from warden.kla.keys import jwk_for
from warden.kla.verify import verify_ed25519

BASIC = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "basic-read.json"
VECTORS: dict[str, Any] = json.loads(asset("kla/rfc8032_vectors.json").read_text())


def _private(name: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS[name]["secret_key"]))


def _public(name: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(VECTORS[name]["public_key"]))


def _flip_bit(signature: str, bit: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(signature + "=="))
    raw[bit // 8] ^= 1 << (bit % 8)
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


@pytest.mark.parametrize("name", ["test1", "test2"])
def test_rfc8032_vector_verifies_through_wardens_path(name: str) -> None:
    v = VECTORS[name]
    message, signature = bytes.fromhex(v["message"]), bytes.fromhex(v["signature"])
    assert verify_ed25519(_public(name), message, signature)
    # the secret key reproduces the vector's signature (Ed25519 is deterministic)
    assert _private(name).sign(message) == signature
    assert not verify_ed25519(_public(name), message + b"\x00", signature)
    other = "test2" if name == "test1" else "test1"
    assert not verify_ed25519(_public(other), message, signature)


def test_sign_and_verify_round_trip_over_the_digest_bytes() -> None:
    digest = record_digest(json.loads(BASIC.read_bytes()))
    signature = sign_digest(_private("test1"), digest)
    assert len(signature) == 86
    assert verify_signature(_public("test1"), digest, signature)
    # the message is the 32 raw bytes: independently checked with cryptography alone
    raw = base64.urlsafe_b64decode(signature + "==")
    _public("test1").verify(raw, digest_bytes(digest))
    # not the hex, not the prefixed string
    assert not verify_ed25519(_public("test1"), digest.encode(), raw)
    assert not verify_ed25519(_public("test1"), digest[7:].encode(), raw)


def test_wrong_key_is_signature_invalid() -> None:
    raw = BASIC.read_bytes()
    digest = record_digest(json.loads(raw))
    signature = sign_digest(_private("test1"), digest)
    assert not verify_signature(_public("test2"), digest, signature)
    outcome = verify_record(raw, signature=signature, public_key=_public("test2"))
    assert outcome.status is VerifyStatus.SIGNATURE_INVALID
    assert verify_record(raw, signature=signature, public_key=_public("test1")).ok


@pytest.mark.parametrize("bit", [0, 7, 255, 256, 511])
def test_one_flipped_signature_bit_is_signature_invalid(bit: int) -> None:
    raw = BASIC.read_bytes()
    signature = sign_digest(_private("test1"), record_digest(json.loads(raw)))
    flipped = _flip_bit(signature, bit)
    assert flipped != signature
    outcome = verify_record(raw, signature=flipped, public_key=_public("test1"))
    assert outcome.status is VerifyStatus.SIGNATURE_INVALID, outcome


def test_signature_over_another_record_is_signature_invalid() -> None:
    edited = asset("kla/request_action_edited.json").read_bytes()
    signature = sign_digest(_private("test1"), record_digest(json.loads(BASIC.read_bytes())))
    outcome = verify_record(edited, signature=signature, public_key=_public("test1"))
    assert outcome.status is VerifyStatus.SIGNATURE_INVALID


def test_standard_base64_signature_is_signature_invalid() -> None:
    raw = BASIC.read_bytes()
    signature = sign_digest(_private("test1"), record_digest(json.loads(raw)))
    std = base64.b64encode(base64.urlsafe_b64decode(signature + "==")).decode()
    assert not verify_signature(_public("test1"), record_digest(json.loads(raw)), std)
    outcome = verify_record(raw, signature=std, public_key=_public("test1"))
    assert outcome.status is VerifyStatus.SIGNATURE_INVALID
    assert "base64url" in outcome.message


def test_hash_mismatch_is_reported_before_the_signature() -> None:
    raw = asset("kla/request_action_edited.json").read_bytes()
    digest = record_digest(json.loads(BASIC.read_bytes()))
    signature = sign_digest(_private("test1"), digest)
    outcome = verify_record(
        raw, expected_digest=digest, signature=signature, public_key=_public("test1")
    )
    assert outcome.status is VerifyStatus.RECORD_HASH_MISMATCH


def test_signature_without_key_and_key_without_signature_are_bad_input() -> None:
    raw = BASIC.read_bytes()
    with pytest.raises(InvalidRequest):
        verify_record(raw, signature="A" * 86)
    with pytest.raises(InvalidRequest):
        verify_record(raw, public_key=_public("test1"))


# --- key registry -----------------------------------------------------------------------


@pytest.mark.parametrize("source", ["kla/jwks_two_keys.json", "kla/pem_dir"])
def test_registry_resolves_by_kid(source: str) -> None:
    registry = KeyRegistry.load(asset(source))
    assert sorted(registry) == ["rfc8032-test1", "rfc8032-test2"]
    raw = BASIC.read_bytes()
    signature = sign_digest(_private("test2"), record_digest(json.loads(raw)))
    ok = verify_record(raw, signature=signature, registry=registry, kid="rfc8032-test2")
    assert ok.ok and ok.signature_checked and ok.kid == "rfc8032-test2"
    wrong = verify_record(raw, signature=signature, registry=registry, kid="rfc8032-test1")
    assert wrong.status is VerifyStatus.SIGNATURE_INVALID
    with pytest.raises(InvalidRequest):  # two keys: the kid must be named
        verify_record(raw, signature=signature, registry=registry)


def test_unknown_kid_is_an_error() -> None:
    registry = KeyRegistry.load(asset("kla/jwks_two_keys.json"))
    with pytest.raises(UnknownKeyId):
        registry.get_key("rfc8032-test3")
    assert "rfc8032-test3" not in registry
    raw = BASIC.read_bytes()
    signature = sign_digest(_private("test1"), record_digest(json.loads(raw)))
    outcome = verify_record(raw, signature=signature, registry=registry, kid="rfc8032-test3")
    assert outcome.status is VerifyStatus.SIGNATURE_INVALID
    assert "rfc8032-test3" in outcome.message


def test_one_key_registry_needs_no_kid(tmp_path: Path) -> None:
    pem = asset("kla/pem_dir/rfc8032-test1.pem")
    registry = KeyRegistry.load(pem)
    assert list(registry) == ["rfc8032-test1"]
    raw = BASIC.read_bytes()
    signature = sign_digest(_private("test1"), record_digest(json.loads(raw)))
    outcome = verify_record(raw, signature=signature, registry=registry)
    assert outcome.ok and outcome.kid == "rfc8032-test1"


def test_jwks_round_trip_matches_rfc8037_example() -> None:
    # RFC 8037 appendix A.2 gives this x for the RFC 8032 TEST 1 public key
    assert jwk_for("k", _public("test1"))["x"] == "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    registry = KeyRegistry.load(asset("kla/jwks_two_keys.json"))
    assert registry.to_jwks() == json.loads(asset("kla/jwks_two_keys.json").read_text())


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("jwks_private_d.json", "private"),
        ("jwks_duplicate_kid.json", "twice"),
        ("jwks_no_kid.json", "no kid"),
        ("jwks_x_31_bytes.json", "31-byte"),
        ("jwks_ec_p256.json", "OKP/Ed25519"),
        ("jwks_not_a_jwks.json", "not a JWKS"),
        ("pem_private_key.pem", "private key"),
        ("pem_ec_p256.pem", "Ed25519"),
        ("request_truncated.json", "not strict JSON"),
        ("does-not-exist.json", "does not exist"),
    ],
)
def test_bad_key_files_are_refused(name: str, words: str) -> None:
    path = asset("kla") / name
    with pytest.raises(ConfigError) as info:
        KeyRegistry.load(path)
    assert words in info.value.message


def test_empty_key_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no Ed25519 public key"):
        KeyRegistry.load(tmp_path)
