"""The JCS fast path must agree byte for byte with the rfc8785 library."""

from __future__ import annotations

import math

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.crypto.canonical import (
    canonical_bytes,
    is_fast_canonical,
    jcs_domain_error,
    number_outside_jcs_at,
    parse_request_json,
    parse_strict_json,
)
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


@pytest.mark.parametrize(
    "value",
    [
        math.inf,
        -math.inf,
        math.nan,
        2**53 + 1,  # no double: a JCS peer reads 2^53 and signs 9007199254740992
        -(2**60),  # exactly a double, but RFC 8785 writes it -1152921504606847000
        10**21,  # RFC 8785 writes 1e+21, never these digits
        10**400,  # no double at all
        "\ud800",
    ],
)
def test_values_outside_the_jcs_domain_are_refused(value: object) -> None:
    with pytest.raises(InvalidRequest, match="JCS"):
        canonical_bytes({"v": value})


@pytest.mark.parametrize(
    "literal",
    [
        "9007199254740992",  # 2^53
        "100000000000000000000",  # 1e20
        "-1152921504606847000",  # -2^60 as ECMAScript writes it
        "999999999999999900000",  # the largest spelling below 1e21 with 16 digits
        "123456789012345680000",
    ],
)
def test_integers_an_rfc8785_serializer_writes_as_digits_are_accepted(literal: str) -> None:
    """Below 10^21 RFC 8785 writes an integral double as plain digits; those digits
    parse as a Python int, and canonicalize back to the same bytes as the double."""
    parsed = parse_strict_json(f'{{"v":{literal}}}')
    assert type(parsed["v"]) is int
    expected = f'{{"v":{literal}}}'.encode()
    assert rfc8785.dumps({"v": float(literal)}) == expected
    assert canonical_bytes(parsed) == expected
    assert canonical_bytes({"v": float(literal)}) == expected  # 1e+20 and the digits agree


@pytest.mark.parametrize(
    "text", ['{"a":1,"a":2}', '{"a":NaN}', '{"a":Infinity}', "[-Infinity]", "{", b"\xff\xfe"]
)
def test_strict_parse_refuses(text: str | bytes) -> None:
    with pytest.raises(ParseError):
        parse_strict_json(text)


@pytest.mark.parametrize("depth", [129, 1000, 100_000])
def test_request_parse_refuses_deep_nesting(depth: int) -> None:
    text = "[" * depth + "]" * depth
    with pytest.raises(ParseError) as info:
        parse_request_json(text)
    assert info.value.reason == "too_deep"


def test_request_parse_takes_128_levels_and_brackets_in_strings() -> None:
    assert parse_request_json("[" * 128 + "]" * 128) is not None
    text = '{"s": "' + "[" * 500 + '\\" ' + "{" * 500 + '"}'
    assert parse_request_json(text)["s"].startswith("[[[")


@pytest.mark.parametrize(
    ("text", "pointer"),
    [
        ('["\\ud800"]', "/0"),
        ('{"a": {"b": "x\\uDC00y"}}', "/a/b"),
        ('{"a": {"\\udbff": 1}}', "/a"),
    ],
)
def test_request_parse_refuses_lone_surrogates(text: str, pointer: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_request_json(text)
    assert info.value.reason == "lone_surrogate"
    assert f"at {pointer} " in info.value.message


def test_request_parse_keeps_surrogate_pairs_and_escaped_backslashes() -> None:
    assert parse_request_json('["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]


@pytest.mark.parametrize("number", ["1e400", "-1E+999", "1" * 400 + ".0"])
def test_finite_refuses_a_number_that_overflows_a_double(number: str) -> None:
    # Without the flag the value parses (as infinity) and canonical_bytes refuses it:
    # /acs answers -32600 jcs_domain, unchanged (decision 761).
    assert math.isinf(parse_strict_json(f'{{"n":{number}}}')["n"])
    with pytest.raises(ParseError) as caught:
        parse_strict_json(f'{{"n":{number}}}', finite=True)
    assert caught.value.reason == "non_standard_number"
    assert parse_strict_json('{"n":1.5e308}', finite=True) == {"n": 1.5e308}


def test_the_number_outside_the_jcs_domain_is_named_by_its_pointer() -> None:
    """Decision 1201: ``/acs`` names where a ``jcs_domain`` number sits, as the MCP proxy
    names an integer it refuses."""
    assert number_outside_jcs_at({"a": [1, 2.5, {"b~/": float("inf")}]}, "/p") == "/p/a/2/b~0~1"
    assert number_outside_jcs_at({"a": [2**64]}) == "/a/0"
    assert number_outside_jcs_at({"a": [10**20, 2**53 - 1, -1.5, "1e400"]}) is None
    value = parse_request_json(b'{"x":{"y":1e400}}')
    with pytest.raises(InvalidRequest) as caught:
        canonical_bytes(value)
    named = jcs_domain_error(caught.value, value)
    assert named.reason == "jcs_domain" and named.data["pointer"] == "/x/y"
    assert named.message == f"{caught.value.message} (the number at /x/y)"
    # Nothing numeric at fault (a lone surrogate): the refusal is left as it was.
    assert jcs_domain_error(caught.value, {"s": "\ud800"}) is caught.value
