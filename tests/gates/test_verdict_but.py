"""``Verdict.but`` is ``dataclasses.replace`` (decision 892): the approval gate's rewrite
of every pending ask uses it instead."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from warden.core.types import BundleRef, Effect, PolicyReference, Verdict


def _full() -> Verdict:
    return Verdict(
        decision=Effect.ASK,
        reasoning="r",
        reason_codes=("a", "b"),
        policy_references=(PolicyReference("p", "1", "r19", "n"),),
        bundle=BundleRef("p", "1", "sha256:0"),
        warn=True,
        modifications={"m": 1},
        ask_details={"question": "q"},
        defer_details={"reason": "d"},
        policy_data={"approval": {"outcome": "pending"}},
        failure="f",
        spend={"s": 1},
        cited_provenance_ids=("p1",),
        provenance_summary={"x": 1},
        intent_extension={"y": 2},
    )


def _fields(v: Verdict) -> dict[str, Any]:
    return {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Verdict)])
def test_but_is_replace_for_every_field(name: str) -> None:
    base = _full()
    new = object()
    got, want = base.but(**{name: new}), dataclasses.replace(base, **{name: new})
    assert type(got) is Verdict and got is not base
    got_fields, want_fields = _fields(got), _fields(want)
    assert got_fields.keys() == want_fields.keys()
    # The same objects, not copies: as replace keeps them.
    assert all(got_fields[k] is want_fields[k] for k in got_fields)
    assert vars(got) == vars(want)
    assert getattr(base, name) is not new  # the original is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.reasoning = "x"  # type: ignore[misc]


def test_but_refuses_a_name_that_is_not_a_field() -> None:
    with pytest.raises(TypeError, match="no field"):
        _full().but(decison=Effect.DENY)
    with pytest.raises(TypeError):
        dataclasses.replace(_full(), decison=Effect.DENY)  # type: ignore[call-arg]


def test_verdict_keeps_what_but_relies_on() -> None:
    # No __slots__ (but copies __dict__), no __post_init__ or InitVar (but skips __init__).
    assert not hasattr(Verdict, "__slots__")
    assert not hasattr(Verdict, "__post_init__")
    assert all(f._field_type is dataclasses._FIELD for f in Verdict.__dataclass_fields__.values())  # type: ignore[attr-defined]
    assert Verdict.__dataclass_params__.frozen  # type: ignore[attr-defined]
