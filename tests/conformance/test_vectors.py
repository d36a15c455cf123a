"""The agt-go interoperability vectors (specs/acs.md §18), checked byte for byte.

Every value is reproduced twice: through Warden's own code (HKDF, JCS, request and response
signing, request_hash, §8.2 chain hashing) and through an independent stdlib-only
implementation that shares no code with Warden, so a bug common to Warden's whole path cannot
hide behind a self-consistent round trip.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from warden.crypto.canonical import canonical_bytes, sha256_hex
from warden.crypto.hmac_keys import SessionKeys, derive_session_key, hmac_sign, hmac_verify
from warden.ledger.chain import chain_entry, compute_entry_hash
from warden.ledger.chain import entry_content as chain_content
from warden.wire.acs.client import verify_response
from warden.wire.acs.signing import (
    request_signing_input,
    sign_request,
    sign_response,
    verify_request,
)

VECTORS = Path(__file__).resolve().parent / "vectors"
ENVELOPE_FILE = VECTORS / "envelope-vectors.json"
CHAIN_FILE = VECTORS / "chain-vectors.json"

# sha256 of the upstream bytes (see vectors/README.md); a changed copy fails here first.
ENVELOPE_SHA256 = "a0aa4d8598057f22a4598a6e9a9c8679a27bceee8e0fa066cca1a8b62b2140f7"
CHAIN_SHA256 = "bb54cdbfbb7e629d4718d4f0a3dcf24ee65f93df56379eb68a3bf0f70212c8c4"


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    doc: dict[str, Any] = json.loads(raw.decode("utf-8"))
    return doc


@pytest.fixture(scope="module")
def env_vec() -> dict[str, Any]:
    return _load(ENVELOPE_FILE)


@pytest.fixture(scope="module")
def chain_vec() -> dict[str, Any]:
    return _load(CHAIN_FILE)


# -- an independent implementation (stdlib only; no warden import) ---------------------------


def ind_jcs(value: Any) -> bytes:
    """Sorted-key compact UTF-8 JSON; equals RFC 8785 for these vectors (strings, no floats,
    BMP keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def ind_hkdf(ikm: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869 HKDF-SHA256 with no salt (= HashLen zero bytes)."""
    prk = hmac.new(b"\x00" * 32, ikm, hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


def ind_mac(key: bytes, message: bytes) -> str:
    return base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode("ascii")


def ind_entry_hash(content: dict[str, Any], previous_hash: str | None) -> str:
    prev = bytes.fromhex(previous_hash) if previous_hash else b""
    return hashlib.sha256(ind_jcs(content) + prev).hexdigest()


# -- the files themselves ----------------------------------------------------------------------


def test_vector_files_are_the_pinned_upstream_bytes() -> None:
    assert hashlib.sha256(ENVELOPE_FILE.read_bytes()).hexdigest() == ENVELOPE_SHA256
    assert hashlib.sha256(CHAIN_FILE.read_bytes()).hexdigest() == CHAIN_SHA256
    # The non-ASCII entry id is stored as raw UTF-8, not as a \u escape.
    assert "é-3".encode() in CHAIN_FILE.read_bytes()


def test_vectors_are_internally_consistent(
    env_vec: dict[str, Any], chain_vec: dict[str, Any]
) -> None:
    """The vectors describe one story: the signed request's params (minus signature) are the
    request_hash params, and the response publishes chain entry 2's hash."""
    params = copy.deepcopy(env_vec["request"]["signed"]["params"])
    del params["signature"]
    assert params == chain_vec["request_hash"]["params"]
    assert (
        env_vec["response"]["signed"]["result"]["chain_hash"]
        == (chain_vec["chain"][1]["entry_hash"])
    )
    assert chain_vec["chain"][1]["entry"]["request_hash"] == chain_vec["request_hash"]["hash"]


# -- HKDF ----------------------------------------------------------------------------------------


def test_session_key_warden(env_vec: dict[str, Any]) -> None:
    ikm = bytes.fromhex(env_vec["ikm_hex"])
    expected = bytes.fromhex(env_vec["session_key_hex"])
    assert derive_session_key(ikm, env_vec["session_id"]) == expected
    assert SessionKeys(ikm).key_for(env_vec["session_id"]) == expected


def test_session_key_independent(env_vec: dict[str, Any]) -> None:
    ikm = bytes.fromhex(env_vec["ikm_hex"])
    expected = bytes.fromhex(env_vec["session_key_hex"])
    assert ind_hkdf(ikm, env_vec["session_id"].encode("utf-8")) == expected
    # An empty salt is the same HKDF as 32 zero bytes (RFC 2104 zero-pads the key).
    prk_empty = hmac.new(b"", ikm, hashlib.sha256).digest()
    prk_zero = hmac.new(b"\x00" * 32, ikm, hashlib.sha256).digest()
    assert prk_empty == prk_zero


# -- request -------------------------------------------------------------------------------------


def test_request_signing_input_warden(env_vec: dict[str, Any]) -> None:
    signed = env_vec["request"]["signed"]
    expected = env_vec["request"]["signing_input"].encode("utf-8")
    assert request_signing_input(signed) == expected


def test_request_hmac_warden(env_vec: dict[str, Any]) -> None:
    key = bytes.fromhex(env_vec["session_key_hex"])
    signed = env_vec["request"]["signed"]
    value = signed["params"]["signature"]["value"]
    assert hmac_sign(key, request_signing_input(signed)) == value
    assert hmac_verify(key, env_vec["request"]["signing_input"].encode("utf-8"), value)
    # Signing the unsigned envelope reproduces the vector's signed envelope exactly.
    unsigned = copy.deepcopy(signed)
    del unsigned["params"]["signature"]
    assert sign_request(unsigned, key, env_vec["key_id"]) == signed


def test_request_verifies_with_warden(env_vec: dict[str, Any]) -> None:
    key = bytes.fromhex(env_vec["session_key_hex"])
    signed = env_vec["request"]["signed"]
    assert verify_request(signed, key) is True
    # ... and only under this key, and only for these exact bytes.
    other = derive_session_key(bytes.fromhex(env_vec["ikm_hex"]), "another-session")
    assert verify_request(signed, other) is False
    tampered = copy.deepcopy(signed)
    tampered["params"]["payload"]["raw_command"] = "echo rm -rf /tmp"
    assert verify_request(tampered, key) is False
    moved = copy.deepcopy(signed)
    moved["method"] = "steps/toolCallResult"
    assert verify_request(moved, key) is False


def test_request_independent(env_vec: dict[str, Any]) -> None:
    key = ind_hkdf(bytes.fromhex(env_vec["ikm_hex"]), env_vec["session_id"].encode("utf-8"))
    signed = env_vec["request"]["signed"]
    params = {k: v for k, v in signed["params"].items() if k != "signature"}
    signing_input = ind_jcs({**signed, "params": params})
    assert signing_input == env_vec["request"]["signing_input"].encode("utf-8")
    assert ind_mac(key, signing_input) == signed["params"]["signature"]["value"]


# -- response ------------------------------------------------------------------------------------


def test_response_signature_warden(env_vec: dict[str, Any]) -> None:
    key = bytes.fromhex(env_vec["session_key_hex"])
    signed = env_vec["response"]["signed"]
    unsigned = copy.deepcopy(signed)
    del unsigned["result"]["signature"]
    assert canonical_bytes(unsigned) == env_vec["response"]["signing_input"].encode("utf-8")
    resigned = sign_response(unsigned, key, env_vec["key_id"])
    assert resigned["result"]["signature"] == signed["result"]["signature"]
    assert resigned == signed
    assert verify_response(signed, key) is True
    tampered = copy.deepcopy(signed)
    tampered["result"]["chain_hash"] = "0" * 64
    assert verify_response(tampered, key) is False


def test_response_independent(env_vec: dict[str, Any]) -> None:
    key = ind_hkdf(bytes.fromhex(env_vec["ikm_hex"]), env_vec["session_id"].encode("utf-8"))
    signed = env_vec["response"]["signed"]
    result = {k: v for k, v in signed["result"].items() if k != "signature"}
    signing_input = ind_jcs({**signed, "result": result})
    assert signing_input == env_vec["response"]["signing_input"].encode("utf-8")
    assert ind_mac(key, signing_input) == signed["result"]["signature"]["value"]


# -- request_hash and the chain ------------------------------------------------------------------


def test_request_hash_warden(chain_vec: dict[str, Any]) -> None:
    rh = chain_vec["request_hash"]
    assert canonical_bytes(rh["params"]) == rh["canonical"].encode("utf-8")
    assert sha256_hex(canonical_bytes(rh["params"])) == rh["hash"]


def test_request_hash_independent(chain_vec: dict[str, Any]) -> None:
    rh = chain_vec["request_hash"]
    assert ind_jcs(rh["params"]) == rh["canonical"].encode("utf-8")
    assert hashlib.sha256(ind_jcs(rh["params"])).hexdigest() == rh["hash"]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_chain_entry_warden(chain_vec: dict[str, Any], index: int) -> None:
    item = chain_vec["chain"][index]
    entry, prev = item["entry"], item["previous_hash"]
    assert canonical_bytes(entry) == item["canonical_content"].encode("utf-8")
    assert compute_entry_hash(entry, prev) == item["entry_hash"]
    chained = chain_entry(entry, prev)
    assert chained["entry_hash"] == item["entry_hash"]
    if prev is None:
        assert "previous_hash" not in chained
    else:
        assert chained["previous_hash"] == prev
    # Hash fields never enter the hashed content.
    assert chain_content(chained) == entry
    assert compute_entry_hash(chain_content(chained), prev) == item["entry_hash"]


def test_chain_links_warden(chain_vec: dict[str, Any]) -> None:
    head: str | None = None
    for item in chain_vec["chain"]:
        assert item["previous_hash"] == head
        head = chain_entry(item["entry"], head)["entry_hash"]
        assert head == item["entry_hash"]
    assert head == chain_vec["chain"][-1]["entry_hash"]


def test_chain_independent(chain_vec: dict[str, Any]) -> None:
    head: str | None = None
    for item in chain_vec["chain"]:
        assert item["previous_hash"] == head
        assert ind_jcs(item["entry"]) == item["canonical_content"].encode("utf-8")
        head = ind_entry_hash(item["entry"], head)
        assert head == item["entry_hash"]


def test_chain_order_matters(chain_vec: dict[str, Any]) -> None:
    """The §8.2 rule is content first, then the raw previous hash; other orders or a hex
    previous hash inside the input must give different values (the vector would catch them)."""
    item = chain_vec["chain"][1]
    content = item["canonical_content"].encode("utf-8")
    prev = bytes.fromhex(item["previous_hash"])
    assert hashlib.sha256(prev + content).hexdigest() != item["entry_hash"]
    assert (
        hashlib.sha256(content + item["previous_hash"].encode()).hexdigest() != (item["entry_hash"])
    )
    assert compute_entry_hash(item["entry"], None) != item["entry_hash"]
