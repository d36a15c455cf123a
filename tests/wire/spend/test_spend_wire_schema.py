"""The shipped seed copy is the seed, byte for byte, and the validators the other spend
wire tests rely on do refuse what the contract forbids (so those tests can fail)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from conftest import SHARED
from spend_wire_helpers import SEED, SEED_COPY, UPSTREAM, UPSTREAM_V1, check_envelope, problems

SEED_SHA256 = "524a046e842c56a5ee3d40c444e20353512b43623904326f32be081fac798441"
UPSTREAM_SHA256 = "003d77f30b4f11cf08f417093bf2b26a9054229acbb51fa259d4c121e5167c07"


def test_the_copies_are_the_documented_bytes() -> None:
    assert hashlib.sha256(SEED_COPY.read_bytes()).hexdigest() == SEED_SHA256
    assert hashlib.sha256(UPSTREAM_V1.read_bytes()).hexdigest() == UPSTREAM_SHA256
    readme = (SEED_COPY.parent / "README.md").read_text()
    assert SEED_SHA256 in readme


def test_the_copy_equals_the_seed_when_the_seed_is_at_hand() -> None:
    seeds = sorted((SHARED / "seeds").glob("003_*")) if (SHARED / "seeds").is_dir() else []
    if not seeds:
        pytest.skip("../shared/seeds is not part of this checkout (CI's clean clone)")
    assert len(seeds) == 1
    assert seeds[0].read_bytes() == SEED_COPY.read_bytes()


MUTATING_OK: dict[str, Any] = {
    "data": {
        "receipt": {"action": "reserve", "oneTimeUsd": 0, "monthlyDeltaUsd": 0, "resources": []},
        "undo": {"command": "POST /v1/reservations/r/release", "irreversible": False},
        "budgetRemainingUsd": 1.5,
    },
    "nextActions": ["commit"],
}


@pytest.mark.parametrize(
    ("status", "body", "mutating"),
    [
        (200, {"data": {}, "nextActions": ["x"], "blockedBy": "a:b"}, False),  # both branches
        (200, {"nextActions": ["x"]}, False),  # no data
        (200, {"data": {}}, False),  # no nextActions (Warden always teaches the next step)
        (400, {"data": {}, "nextActions": ["x"]}, False),  # a success with an error status
        (200, {"blockedBy": "input:x", "message": "m", "retryable": False}, False),
        (400, {"blockedBy": "Input:Bad", "message": "m", "retryable": False}, False),
        (400, {"blockedBy": "input:x", "message": "m", "retryable": False, "limit": "5"}, False),
        (400, {"blockedBy": "input:x", "message": "m", "retryable": "no"}, False),
        (
            400,
            {"blockedBy": "input:x", "message": "m", "retryable": False, "resolution": {}},
            False,
        ),
        (
            400,
            {
                "blockedBy": "input:x",
                "message": "m",
                "retryable": False,
                "resolution": {"type": "Retry"},
            },
            False,
        ),
        (200, {**MUTATING_OK, "data": {**MUTATING_OK["data"], "budgetRemainingUsd": "1.5"}}, True),
        (200, {**MUTATING_OK, "data": {**MUTATING_OK["data"], "budgetRemainingUsd": -1}}, True),
        (200, {**MUTATING_OK, "data": {**MUTATING_OK["data"], "undo": None}}, True),
        (
            200,
            {**MUTATING_OK, "data": {**MUTATING_OK["data"], "undo": {"irreversible": True}}},
            True,
        ),
        (
            200,
            {
                **MUTATING_OK,
                "data": {**MUTATING_OK["data"], "undo": {"command": None, "irreversible": False}},
            },
            True,
        ),
        (
            200,
            {
                **MUTATING_OK,
                "data": {k: v for k, v in MUTATING_OK["data"].items() if k != "receipt"},
            },
            True,
        ),
        (200, {**MUTATING_OK, "extra": 1}, True),  # upstream closes the mutating envelope
        (200, {**MUTATING_OK, "data": {**MUTATING_OK["data"], "replayed": True}}, True),
        (200, {**MUTATING_OK, "nextActions": []}, True),
    ],
)
def test_the_envelope_checks_refuse_what_the_contract_forbids(
    status: int, body: dict[str, Any], mutating: bool
) -> None:
    with pytest.raises(AssertionError):
        check_envelope(status, body, mutating=mutating)


def test_a_valid_mutating_envelope_passes_and_replayed_is_allowed() -> None:
    check_envelope(200, MUTATING_OK, mutating=True)
    replayed = {**MUTATING_OK, "replayed": True}
    check_envelope(200, replayed, mutating=True)
    # the seed's success envelope does not declare `replayed` but does not forbid it either
    seed = SEED_COPY.read_text()
    assert '"replayed"' not in seed
    assert not re.search(r'"successEnvelope"[^}]*"additionalProperties"', seed)
    assert not problems(SEED["successEnvelope"], replayed)
    assert not problems(UPSTREAM["mutatingSuccessEnvelope"], replayed)
