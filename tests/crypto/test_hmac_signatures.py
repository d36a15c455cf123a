"""HMAC-SHA256 signature values are accepted only in canonical padded base64: the 44
characters ``hmac_sign`` writes. Other spellings of the same 32 bytes (the two unused
trailing bits set, no padding, whitespace, the URL-safe alphabet) are refused, as the
KLA signature decoder refuses them (issue 14 item 10)."""

from __future__ import annotations

import base64

import pytest

from warden.crypto.hmac_keys import hmac_sign, hmac_verify

KEY = bytes(range(32))
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _signed(message: bytes) -> str:
    value = hmac_sign(KEY, message)
    assert len(value) == 44 and value.endswith("=") and value.count("=") == 1
    return value


def _trailing_bits(value: str, bits: int) -> str:
    last = ALPHABET.index(value[42])
    return value[:42] + ALPHABET[(last & ~0b11) | bits] + "="


@pytest.mark.parametrize("bits", [0b01, 0b10, 0b11])
def test_trailing_bits_set_are_refused(bits: int) -> None:
    # Find a message whose canonical MAC ends in a character with both spare bits zero
    # (every canonical one does) and set them: a lax decoder reads the same bytes.
    value = _signed(b"message")
    twin = _trailing_bits(value, bits)
    assert twin != value and base64.b64decode(twin) == base64.b64decode(value)
    assert hmac_verify(KEY, b"message", value)
    assert not hmac_verify(KEY, b"message", twin)


@pytest.mark.parametrize(
    "spell",
    [
        lambda v: v.rstrip("="),  # no padding
        lambda v: v + "\n",
        lambda v: " " + v,
        lambda v: v[:20] + "\n" + v[20:],
        lambda v: v.replace("+", "-").replace("/", "_") if ("+" in v or "/" in v) else v + "=",
        lambda v: v + "==",
        lambda v: v.lower() if v.lower() != v else v + "A",
        lambda v: "é" + v,
    ],
)
def test_other_spellings_are_refused(spell: object) -> None:
    value = _signed(b"payload")
    other = spell(value)  # type: ignore[operator]
    assert other != value
    assert not hmac_verify(KEY, b"payload", other)


def test_the_canonical_value_verifies_and_another_message_does_not() -> None:
    value = _signed(b"a")
    assert hmac_verify(KEY, b"a", value)
    assert not hmac_verify(KEY, b"b", value)
    assert not hmac_verify(bytes(32), b"a", value)


def test_the_keyed_copy_gives_the_one_shot_mac_for_every_key_and_message() -> None:
    # hmac_sha256 copies a keyed state per message (decision 945); it must give exactly
    # the bytes of the one-shot hmac.digest, for keys of every length (a key longer than
    # SHA-256's 64-byte block is hashed first), for the same key used again after other
    # keys (the state is never updated in place), and for the empty message.
    import hashlib
    import hmac
    import os

    from warden.crypto import hmac_keys

    keys = [KEY, b"k", bytes(64), os.urandom(65), os.urandom(200), b""]
    messages = [b"", b"m", os.urandom(63), os.urandom(64), os.urandom(1726)]
    for _ in range(2):
        for key in keys:
            for message in messages:
                expected = hmac.digest(key, message, "sha256")
                assert hmac_keys.hmac_sha256(key, message) == expected
                assert hmac_keys.hmac_sign(key, message) == base64.b64encode(expected).decode()
                assert hmac.new(key, message, hashlib.sha256).digest() == expected
    assert all(k in hmac_keys._KEYED for k in keys)


def test_the_keyed_states_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from warden.crypto import hmac_keys

    monkeypatch.setattr(hmac_keys, "_KEYED", {})
    monkeypatch.setattr(hmac_keys, "_KEYED_LIMIT", 3)
    for i in range(7):
        key = bytes([i]) * 32
        assert (
            hmac_keys.hmac_sign(key, b"x")
            == base64.b64encode(__import__("hmac").digest(key, b"x", "sha256")).decode()
        )
        assert len(hmac_keys._KEYED) <= 3
    assert list(hmac_keys._KEYED) == [bytes([6]) * 32]
