"""ACS-Crypto algorithms (issue 21, warden.crypto.asymmetric): agent public keys from PEM
and JWK, verification by each registered algorithm, and what is refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, mldsa, rsa

from warden.crypto import asymmetric
from warden.errors import ConfigError

MESSAGE = b'{"jsonrpc":"2.0","method":"steps/toolCallRequest"}'


def _pem(key: Any) -> bytes:
    return bytes(
        key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _int(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


KEYS: list[tuple[str, Any]] = [
    ("ML-DSA-65", mldsa.MLDSA65PrivateKey.generate()),
    ("ML-DSA-44", mldsa.MLDSA44PrivateKey.generate()),
    ("ECDSA-P256", ec.generate_private_key(ec.SECP256R1())),
    ("RSA-PSS-SHA256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
]


def _jwk(algorithm: str, public: Any) -> dict[str, Any]:
    if algorithm.startswith("ML-DSA"):
        return {"kty": "AKP", "alg": algorithm, "pub": _b64url(public.public_bytes_raw())}
    if algorithm == "ECDSA-P256":
        nums = public.public_numbers()
        return {
            "kty": "EC",
            "crv": "P-256",
            "x": _b64url(nums.x.to_bytes(32, "big")),
            "y": _b64url(nums.y.to_bytes(32, "big")),
        }
    nums = public.public_numbers()
    return {"kty": "RSA", "n": _int(nums.n), "e": _int(nums.e)}


@pytest.mark.parametrize(("algorithm", "private"), KEYS, ids=[k[0] for k in KEYS])
def test_each_algorithm_from_pem_and_jwk(algorithm: str, private: Any) -> None:
    signature = asymmetric.sign_with(algorithm, private, MESSAGE)
    for data in (_pem(private.public_key()), json.dumps(_jwk(algorithm, private.public_key()))):
        raw = data if isinstance(data, bytes) else data.encode()
        got, public = asymmetric.parse_public_key(raw)
        assert got == algorithm
        assert asymmetric.verify(algorithm, public, MESSAGE, signature)
        assert not asymmetric.verify(algorithm, public, MESSAGE + b" ", signature)
        flipped = bytearray(signature)
        flipped[-1] ^= 1
        assert not asymmetric.verify(algorithm, public, MESSAGE, bytes(flipped))
        # Stored as SPKI DER and loaded back: the same key.
        again = asymmetric.key_from_spki_b64(asymmetric.spki_b64(public))
        assert asymmetric.verify(algorithm, again, MESSAGE, signature)


def test_the_signature_must_name_the_keys_own_algorithm() -> None:
    private = mldsa.MLDSA65PrivateKey.generate()
    signature = private.sign(MESSAGE)
    assert not asymmetric.verify("ML-DSA-44", private.public_key(), MESSAGE, signature)
    assert not asymmetric.verify("HMAC-SHA256", private.public_key(), MESSAGE, signature)


def test_ecdsa_values_are_r_concat_s_only() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.sign(MESSAGE, ec.ECDSA(hashes.SHA256()))
    assert not asymmetric.verify("ECDSA-P256", private.public_key(), MESSAGE, der)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            bytes(
                mldsa.MLDSA65PrivateKey.generate().private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            ),
            "private key",
        ),
        (_pem(ec.generate_private_key(ec.SECP384R1()).public_key()), "P-256"),
        (
            _pem(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()),
            "2048",
        ),
        (_pem(ed25519.Ed25519PrivateKey.generate().public_key()), "Ed25519"),
        (
            json.dumps({"kty": "AKP", "alg": "ML-DSA-65", "pub": "AA", "priv": "AA"}).encode(),
            "private",
        ),
        (json.dumps({"kty": "oct", "k": "AA"}).encode(), "kty"),
        (b"not a key", "neither"),
    ],
    ids=["private-pem", "p384", "rsa1024", "ed25519", "jwk-priv", "oct", "garbage"],
)
def test_refused_keys(data: bytes, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        asymmetric.parse_public_key(data)


def test_signature_values_have_one_spelling() -> None:
    raw = bytes(range(10))
    good = base64.b64encode(raw).decode()
    assert asymmetric.decode_b64(good) == raw
    for bad in (good.rstrip("="), good + "\n", good.replace("=", "") + "==="):
        assert asymmetric.decode_b64(bad) is None


def test_warden_key_file_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "mldsa.key"
    first, created = asymmetric.load_or_create_mldsa_key(path)
    assert created and path.stat().st_mode & 0o777 == 0o600
    again, created_again = asymmetric.load_or_create_mldsa_key(path)
    assert not created_again and again.kid == first.kid
    assert again.jwk()["kty"] == "AKP" and again.jwk()["alg"] == "ML-DSA-65"
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="group/others"):
        asymmetric.load_mldsa_key(path)
