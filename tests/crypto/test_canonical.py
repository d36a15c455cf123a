"""The JCS fast path must agree byte for byte with the rfc8785 library."""

from __future__ import annotations

import math

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.crypto.canonical import canonical_bytes, is_fast_canonical, parse_strict_json
from warden.errors import InvalidRequest, ParseError

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


def _jcs_or_none(value: object) -> bytes | None:
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError):
        return None


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_fast_path_matches_rfc8785(value: object) -> None:
    expected = _jcs_or_none(value)
    if expected is None:
        with pytest.raises(InvalidRequest):
            canonical_bytes(value)
    else:
        assert canonical_bytes(value) == expected


def test_fast_path_is_taken_for_float_free_values_and_not_for_floats() -> None:
    assert is_fast_canonical({"a": [1, "x", None, True, {"b": -(2**53) + 1}]})
    assert not is_fast_canonical({"a": 1.5})
    assert not is_fast_canonical({"a": 2**53})
    assert not is_fast_canonical({"\U0001f600": 1})  # UTF-16 order differs from code points


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": "é\n\u001f"}, b'{"a":"\xc3\xa9\\n\\u001f","b":1}'),
        ({"\ue000": 1, "\U0001f600": 2}, '{"\U0001f600":2,"\ue000":1}'.encode()),
        ([1.0, 1e21, 0.1], b"[1,1e+21,0.1]"),
    ],
)
def test_known_canonical_forms(value: object, expected: bytes) -> None:
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 2**53, -(2**60), "\ud800"])
def test_values_outside_the_jcs_domain_are_refused(value: object) -> None:
    with pytest.raises(InvalidRequest):
        canonical_bytes({"v": value})


@pytest.mark.parametrize(
    "text", ['{"a":1,"a":2}', '{"a":NaN}', '{"a":Infinity}', "[-Infinity]", "{", b"\xff\xfe"]
)
def test_strict_parse_refuses(text: str | bytes) -> None:
    with pytest.raises(ParseError):
        parse_strict_json(text)
