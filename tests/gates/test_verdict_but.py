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


def _new_values() -> dict[str, Any]:
    """A new object for each field, of the field's type (compiled by mypyc, a Verdict
    checks its fields' types: a bare ``object()`` is refused by ``replace`` too)."""
    return {
        "decision": Effect.DENY,
        "reasoning": "".join(["n", "ew"]),
        "reason_codes": ("new",),
        "policy_references": (PolicyReference("q", "2", "r20", "m"),),
        "bundle": BundleRef("q", "2", "sha256:1"),
        "warn": False,
        "modifications": {"m": 2},
        "ask_details": {"question": "q2"},
        "defer_details": {"reason": "d2"},
        "policy_data": {},
        "failure": "".join(["g", "2"]),
        "spend": {"s": 2},
        "cited_provenance_ids": ("p2",),
        "provenance_summary": {"x": 2},
        "intent_extension": {"y": 3},
    }


def test_new_values_cover_every_field() -> None:
    assert set(_new_values()) == {f.name for f in dataclasses.fields(Verdict)}


def _instance_dict(v: Verdict) -> dict[str, Any] | None:
    # Compiled by mypyc, a Verdict is a native class: no instance ``__dict__``.
    return vars(v) if Verdict.__dictoffset__ else None


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Verdict)])
def test_but_is_replace_for_every_field(name: str) -> None:
    base = _full()
    new = _new_values()[name]
    got, want = base.but(**{name: new}), dataclasses.replace(base, **{name: new})
    assert type(got) is Verdict and got is not base
    got_fields, want_fields = _fields(got), _fields(want)
    assert got_fields.keys() == want_fields.keys()
    # The same objects, not copies: as replace keeps them.
    assert all(got_fields[k] is want_fields[k] for k in got_fields)
    assert _instance_dict(got) == _instance_dict(want)
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


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Verdict)])
def test_the_compiled_path_is_replace_for_every_field(name: str) -> None:
    # `but` takes `_native_but` only where the module is compiled; called here directly,
    # so a field it forgot fails as Python too (decision 333).
    from warden.core.types import _native_but

    base = _full()
    new = _new_values()[name]
    got, want = _native_but(base, {name: new}), dataclasses.replace(base, **{name: new})
    assert type(got) is Verdict and got is not base
    got_fields, want_fields = _fields(got), _fields(want)
    assert all(got_fields[k] is want_fields[k] for k in want_fields)
    assert got_fields == want_fields
