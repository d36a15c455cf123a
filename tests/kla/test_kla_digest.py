"""Record digests (seed 004 §05): sha256: over the RFC 8785 bytes of the whole record."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import rfc8785
from conftest import ROOT, asset

from warden.errors import InvalidRequest, ParseError
from warden.kla import VerifyStatus, record_digest, verify_record
from warden.kla.digest import decode_signature, digest_bytes, encode_signature, manifest_digest

EXAMPLES = ROOT / "src" / "warden" / "schemas" / "kla" / "examples"
BASIC = EXAMPLES / "basic-read.json"
CREDIT = EXAMPLES / "credit-disposition.json"

#: Pinned after computing once; any change to canonicalization or hashing breaks these.
BASIC_DIGEST = "sha256:14942f584b73733068adc207e1916abdb39523a4607574d4ba31c9ade7e0ff01"
CREDIT_DIGEST = "sha256:e4d5a4fa82f34577b9b67e19514cf6b1ba573fface47bdc75d14a7f98e8e0950"


def _independent_digest(path: Path) -> str:
    """The digest without Warden's code: for an ASCII record with no numbers,
    json.dumps(sort_keys, no spaces) is byte-identical to RFC 8785."""
    doc = json.loads(path.read_bytes())
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_seed_minimal_example_is_the_seed_text() -> None:
    seed = next((ROOT.parent / "shared" / "seeds").glob("004_*.txt"), None)
    if seed is None:
        pytest.skip("shared/seeds not present")
    text = seed.read_text(encoding="utf-8")
    start = text.index('{\n"schema_version"')
    end = text.index("}05", start) + 1
    assert BASIC.read_text(encoding="utf-8") == text[start:end] + "\n"


def test_seed_minimal_example_has_a_stable_digest() -> None:
    outcome = verify_record(BASIC.read_bytes())
    assert outcome.status is VerifyStatus.OK, outcome
    assert outcome.digest == BASIC_DIGEST
    assert _independent_digest(BASIC) == BASIC_DIGEST
    assert record_digest(json.loads(BASIC.read_bytes())) == BASIC_DIGEST


def test_credit_example_has_a_stable_digest() -> None:
    assert verify_record(CREDIT.read_bytes()).digest == CREDIT_DIGEST
    assert _independent_digest(CREDIT) == CREDIT_DIGEST


def test_digest_is_over_rfc8785_bytes_not_the_file_bytes() -> None:
    doc = json.loads(BASIC.read_bytes())
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(doc)).hexdigest()
    assert record_digest(doc) == expected
    assert hashlib.sha256(BASIC.read_bytes()).hexdigest() != expected[7:]
    reordered = json.dumps(dict(reversed(list(doc.items()))), indent=4)
    assert verify_record(reordered, expected_digest=BASIC_DIGEST).ok


def test_non_ascii_record_digest_uses_jcs_ordering() -> None:
    doc = {"b": "é", "a": "\u20ac", "\u00e9": "x", "\U0001f600": "y", "\ufb01": "z"}
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(doc)).hexdigest()
    assert record_digest(doc) == expected


def test_changed_action_is_record_hash_mismatch() -> None:
    edited = asset("kla/request_action_edited.json").read_bytes()
    outcome = verify_record(edited, expected_digest=BASIC_DIGEST)
    assert outcome.status is VerifyStatus.RECORD_HASH_MISMATCH
    assert outcome.digest != BASIC_DIGEST
    assert BASIC_DIGEST in outcome.message
    # the edited record is still well-formed: only the digest tells
    assert verify_record(edited).ok


def test_duplicate_key_is_refused_before_hashing() -> None:
    with pytest.raises(ParseError) as info:
        verify_record(asset("kla/request_duplicate_key.json").read_bytes())
    assert info.value.reason == "duplicate_key"


def test_truncated_json_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        verify_record(asset("kla/request_truncated.json").read_bytes())


@pytest.mark.parametrize(
    "bad",
    [
        "sha256:" + "A" * 64,
        "14942f584b73733068adc207e1916abdb39523a4607574d4ba31c9ade7e0ff01",
        "sha512:" + "0" * 64,
        "sha256:" + "0" * 63,
        "sha256:" + "0" * 64 + "\n",
    ],
)
def test_malformed_expected_digest_is_bad_input(bad: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        verify_record(BASIC.read_bytes(), expected_digest=bad)
    assert info.value.reason == "bad_digest"
    with pytest.raises(InvalidRequest):
        digest_bytes(bad)


def test_digest_bytes_are_the_32_raw_bytes() -> None:
    raw = digest_bytes(BASIC_DIGEST)
    assert len(raw) == 32 and raw.hex() == BASIC_DIGEST[7:]


def test_signature_encoding_is_unpadded_base64url_only() -> None:
    sig = bytes(range(64))
    text = encode_signature(sig)
    assert len(text) == 86 and "=" not in text
    assert decode_signature(text) == sig
    for bad in (
        text + "==",  # padded
        text[:10] + "+" + text[11:],  # standard base64 alphabet
        text[:10] + "/" + text[11:],
        text[:-1],  # short
        text[:-1] + "B",  # non-zero trailing bits (last char of 64 bytes carries 2 bits)
        " " + text[1:],
    ):
        with pytest.raises(InvalidRequest):
            decode_signature(bad)


def test_manifest_digest_leaves_out_signature_and_kid() -> None:
    manifest = {"bundle_version": "1.0.0", "records": [BASIC_DIGEST]}
    signed = dict(manifest, signature="x" * 86, kid="k")
    assert manifest_digest(signed) == record_digest(manifest)
    assert "signature" in signed  # not modified
