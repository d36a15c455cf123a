"""The head checkpoint's signature skips the JCS walk when its four scalars have exact
JSON types (decision 946): the signed bytes must be rfc8785's in every case, and a value
outside the domain must still be refused."""

from __future__ import annotations

import pytest
import rfc8785

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import SessionKeys, hmac_sign
from warden.errors import InvalidRequest
from warden.ledger.ledger import Ledger

IKM = bytes(range(32))


class _Str(str):
    pass


class _Store:
    session_signer = None


def _ledger() -> Ledger:
    return Ledger(_Store(), SessionKeys(IKM), "warden")  # type: ignore[arg-type]


def _expected(session_id: str, seq: int, chain_hash: str, closed: bool) -> str:
    record = {
        "kind": "head",
        "session_id": str(session_id),
        "seq": seq,
        "chain_hash": str(chain_hash),
        "closed": closed,
    }
    return hmac_sign(SessionKeys(IKM).key_for(session_id), rfc8785.dumps(record))


@pytest.mark.parametrize(
    ("session_id", "seq", "chain_hash", "closed"),
    [
        ("9d511cf5-5ff7-43ab-a516-faa28f9e24f5", 20, "5d17" * 16, False),
        ("s", 0, "", True),
        ("sessión-ü-\u2028-\U0001f600", 2**53 - 1, "ab" * 32, False),
        ('quote"back\\slash\x00\x1f', 1, "c" * 64, True),
        (_Str("subclass-id"), 3, _Str("d" * 64), False),  # walked, as before
    ],
)
def test_the_head_signature_is_over_the_records_jcs(
    session_id: str, seq: int, chain_hash: str, closed: bool
) -> None:
    signed = _ledger().signed_head(session_id, seq, chain_hash, closed=closed)
    assert signed == {
        "algorithm": "HMAC-SHA256",
        "value": _expected(session_id, seq, chain_hash, closed),
        "key_id": "warden",
    }


def test_a_head_outside_the_jcs_domain_is_refused_as_before() -> None:
    with pytest.raises(InvalidRequest) as fast:
        _ledger().signed_head("s", 1, "lone-\ud800")
    with pytest.raises(InvalidRequest) as walked:
        canonical_bytes({"session_id": "lone-\ud800"})
    assert fast.value.reason == walked.value.reason == "jcs_domain"
    with pytest.raises(InvalidRequest):
        _ledger().signed_head("s", 2**53 + 1, "e" * 64)  # beyond 2^53, no double spells it
