"""The float-capable JCS fast path (issue 16) must write exactly what RFC 8785 writes.

Three oracles: the ``rfc8785`` library (property tests over arbitrary JSON values),
RFC 8785 Appendix B's number table, and ECMAScript itself (Node.js's
``Number.prototype.toString``, stored in tests/assets/jcs/es6-numbers.txt.gz and, when
``node`` is installed, asked afresh).
"""

from __future__ import annotations

import gzip
import json
import math
import random
import shutil
import struct
import subprocess
from typing import Any

import pytest
import rfc8785
from conftest import asset
from hypothesis import example, given, settings
from hypothesis import strategies as st

from warden.crypto import jcs_fast
from warden.crypto.canonical import canonical_bytes
from warden.crypto.ecmascript_number import ecmascript_number
from warden.crypto.jcs_fast import (
    JcsRoute,
    fast_jcs_bytes,
    is_direct_jcs,
    jcs_route,
    jcs_writable,
)
from warden.errors import InvalidRequest


def _double(hex_bits: str) -> float:
    return float(struct.unpack(">d", bytes.fromhex(hex_bits.rjust(16, "0")))[0])


# Doubles of every magnitude: hypothesis's own floats (subnormals, ±0, extremes) plus
# random bit patterns, and the neighbours of the thresholds where the text changes form.
_THRESHOLDS = [1e-7, 1e-6, 1e-3, 1e15, 1e16, 2.0**53, 1e21, 5e-324, 2.2250738585072014e-308]
finite_doubles = (
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)
    | st.integers(min_value=0, max_value=2**64 - 1)
    .map(lambda bits: _double(f"{bits:016x}"))
    .filter(math.isfinite)
    | st.sampled_from(_THRESHOLDS).flatmap(
        lambda x: st.sampled_from(
            [math.nextafter(x, 0.0), x, math.nextafter(x, math.inf), -x, 0.0, -0.0]
        )
    )
)
# Keys mixing ASCII, U+E000–U+FFFF and astral characters, whose UTF-16 order differs
# from code-point order (RFC 8785 §3.2.3), and characters JSON must escape.
key_chars = st.sampled_from(
    ["a", "b", "é", "\ue000", "\uffff", "\U00010000", "\U0001f600", "\x00", '"', "\\", "\x7f"]
) | st.characters(exclude_categories=("Cs",))
json_keys = st.text(alphabet=key_chars, max_size=6)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | finite_doubles
    | st.text(alphabet=key_chars, max_size=10)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(json_keys, children, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
@example({"amount_usd": 1500.5, "currency": "USD", "qty": 3})
@example({"\U0001f600": 1e-7, "\ue000": -0.0, "a": [1e21, 2.0**60, 1500.0]})
def test_fast_path_writes_rfc8785_bytes_for_every_json_value(value: Any) -> None:
    expected = rfc8785.dumps(value)
    assert fast_jcs_bytes(value) == expected  # never "not sure" inside the domain
    assert canonical_bytes(value) == expected
    if is_direct_jcs(value):
        assert canonical_bytes(value, known_fast=True) == expected


def _members(value: Any) -> list[Any]:
    """``value`` and every value inside it."""
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        out.append(v)
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


@settings(max_examples=300, deadline=None)
@given(json_values)
@example({"params": {"arguments": {"amount_usd": {"value": 2500.0}}, "id": "x"}})
@example({"\U0001f600": {"b": 1e-7, "a": [1e21]}, "\ue000": -0.0})
def test_a_route_found_for_a_value_writes_every_value_inside_it(value: Any) -> None:
    """``within`` (the route of a containing value) skips the walk and still writes
    each inner value as rfc8785 does: the ACS wire walks a request once and
    canonicalizes its signing input and its params by that route."""
    route = jcs_route(value)
    for inner in _members(value):
        expected = rfc8785.dumps(inner)
        assert fast_jcs_bytes(inner, within=route) == expected
        assert canonical_bytes(inner, within=route) == expected


def _pairs(value: Any, copy: Any) -> list[tuple[Any, Any]]:
    """``(v, c)`` for ``value`` and every value inside it, ``c`` at the same place in
    ``copy``; asserts the two have the same shape on the way."""
    out, stack = [], [(value, copy)]
    while stack:
        v, c = stack.pop()
        out.append((v, c))
        if isinstance(v, dict):
            assert list(c) == list(v)  # same members, same order
            stack.extend((v[k], c[k]) for k in v)
        elif isinstance(v, list):
            assert len(c) == len(v)
            stack.extend(zip(v, c, strict=True))
    return out


@settings(max_examples=400, deadline=None)
@given(json_values)
@example({"params": {"arguments": {"amount_usd": {"value": 2500.0}}, "id": "x"}})
@example({"a": [2500.0, -0.0, 1e-7], "b": {"c": 3.0}})
@example({"a": [2500.0, 2.0**60]})
@example({"\U0001f600": 1.0})
def test_a_writable_copy_writes_each_inner_value_as_rfc8785_writes_the_original(
    value: Any,
) -> None:
    """The ACS wire converts a request's floats once (``jcs_writable``) and writes its
    signing input and params from the copy by the copy's route: each value inside the
    copy must give the rfc8785 bytes of the value at the same place in the original,
    and the original must be left as it was."""
    before = repr(value)
    route = jcs_route(value)
    copy, copy_route = jcs_writable(value, route)
    assert repr(value) == before
    if route is not JcsRoute.NUMBERS:
        assert copy is value and copy_route is route
    else:
        assert copy_route in (JcsRoute.DIRECT, JcsRoute.NUMBERS)
        if copy_route is JcsRoute.NUMBERS:
            assert copy is value  # a float needing a placeholder: no copy
    for inner, inner_copy in _pairs(value, copy):
        expected = rfc8785.dumps(inner)
        assert canonical_bytes(inner_copy, within=copy_route) == expected
        if copy_route is JcsRoute.DIRECT:  # (1e-7 stays a float the encoder writes right)
            assert canonical_bytes(inner_copy, known_fast=True) == expected


@settings(max_examples=800, deadline=None)
@given(finite_doubles)
def test_every_double_is_written_as_rfc8785_writes_it(x: float) -> None:
    assert ecmascript_number(x).encode() == rfc8785.dumps(x)
    assert fast_jcs_bytes([x]) == b"[" + rfc8785.dumps(x) + b"]"


@given(st.floats(min_value=1e-3, max_value=1e15, exclude_max=True, allow_subnormal=False))
def test_doubles_written_as_they_are_have_identical_repr_and_ecmascript_text(x: float) -> None:
    """The premise of is_direct_jcs: in this band a non-integral double's repr is its
    ECMAScript text, so the C encoder may write it unchanged."""
    if not x.is_integer():
        assert repr(x) == ecmascript_number(x)
        assert repr(-x) == ecmascript_number(-x)


_APPENDIX_B = json.loads(asset("jcs/rfc8785-appendix-b.json").read_text())["rows"]


@pytest.mark.parametrize(("hex_bits", "expected", "note"), _APPENDIX_B)
def test_rfc8785_appendix_b_number_samples(hex_bits: str, expected: str | None, note: str) -> None:
    x = _double(hex_bits)
    if expected is None:  # NaN and Infinity: outside JSON, an error (note 3)
        with pytest.raises(ValueError):
            ecmascript_number(x)
        assert fast_jcs_bytes({"n": x}) is None
        with pytest.raises(InvalidRequest, match="JCS"):
            canonical_bytes({"n": x})
    else:
        assert ecmascript_number(x) == expected
        assert canonical_bytes({"n": x}) == f'{{"n":{expected}}}'.encode()


def test_es6_number_vectors_from_node() -> None:
    """9,162 doubles (the es6testfile100m edge table, every power of ten's neighbours,
    prices, random bit patterns) and V8's text for each."""
    lines = gzip.decompress(asset("jcs/es6-numbers.txt.gz").read_bytes()).decode().split()
    assert len(lines) > 9000
    wrong = []
    for line in lines:
        hex_bits, expected = line.split(",")
        x = _double(hex_bits)
        if ecmascript_number(x) != expected or fast_jcs_bytes(x) != expected.encode():
            wrong.append(line)
    assert wrong == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_fresh_random_doubles_against_node() -> None:
    rng = random.Random()
    hexes = []
    while len(hexes) < 20_000:
        bits = rng.getrandbits(64)
        if (bits >> 52) & 0x7FF != 0x7FF:
            hexes.append(f"{bits:016x}")
    script = asset("jcs/es6_to_string.js")
    out = subprocess.run(
        ["node", str(script)], input="\n".join(hexes), capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(out) == len(hexes)
    wrong = [
        line for line in out if ecmascript_number(_double(line.split(",")[0])) != line.split(",")[1]
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("value", "route"),
    [
        ({"amount_usd": 1500.5, "n": [1, "x", None, True]}, JcsRoute.DIRECT),
        ({"p": 0.001, "q": -999999999999999.9, "\uffff": "\U0001f600"}, JcsRoute.DIRECT),
        ({"amount_usd": 1500.0}, JcsRoute.NUMBERS),  # ECMAScript writes 1500
        ({"x": [1e-7]}, JcsRoute.NUMBERS),
        ({"x": -0.0}, JcsRoute.NUMBERS),
        ({"x": 1e21}, JcsRoute.NUMBERS),
        ({"\U0001f600": 1}, JcsRoute.ORDER),  # UTF-16 order differs from code points
        ({"\U0001f600": 1.0, "a": 0.5}, JcsRoute.ORDER),
        ({"x": 2**53}, JcsRoute.UNSURE),
        ({"x": math.nan, "\U0001f600": 1}, JcsRoute.UNSURE),
        ({"x": -math.inf}, JcsRoute.UNSURE),
        ({1: "a"}, JcsRoute.UNSURE),
        ([1, (2,)], JcsRoute.UNSURE),
    ],
)
def test_the_walk_routes_each_value_to_the_cheapest_exact_writer(
    value: Any, route: JcsRoute
) -> None:
    assert jcs_route(value) is route
    assert is_direct_jcs(value) is (route is JcsRoute.DIRECT)
    if route is not JcsRoute.UNSURE:
        assert fast_jcs_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        {"x": math.inf},
        {"x": math.nan},
        {"x": 2**53 + 1},
        {"x": 2**60},  # in the domain only as -1152921504606847000's spelling
        {"x": 10**21},
        {"x": True, 2: 3},
        {"x": "\ud800", "y": 1e-7},
        {"x": (1, 2)},
    ],
)
def test_the_fast_path_leaves_what_it_cannot_be_sure_of_to_rfc8785(value: Any) -> None:
    assert fast_jcs_bytes(value) is None


@pytest.mark.parametrize("literal", ["9007199254740992", "-1152921504606847000"])
def test_integers_beyond_2_53_keep_todays_rule(literal: str) -> None:
    value = {"v": int(literal), "f": 1500.5}
    assert canonical_bytes(value) == f'{{"f":1500.5,"v":{literal}}}'.encode()


def test_a_placeholder_in_the_callers_data_cannot_change_the_bytes() -> None:
    stem = jcs_fast._PLACEHOLDER_STEM
    for index in range(3):
        value = {"a": f"{stem}{index}\x00", "b": [1e-7, 1.5e-5, 2e-9], "c": f'x"{stem}0\x00'}
        assert canonical_bytes(value) == rfc8785.dumps(value)


def test_a_value_too_deep_for_the_encoder_is_refused_as_outside_the_domain() -> None:
    deep: Any = 1.5
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InvalidRequest, match="JCS"):
        canonical_bytes(deep)


def test_the_callers_value_is_not_changed() -> None:
    value = {"\U0001f600": [1500.0, 1e-7], "a": {"b": -0.0}}
    before = repr(value)
    canonical_bytes(value)
    assert repr(value) == before
