"""The strict parse's orjson path answers exactly as the stdlib path (decision 890).

``parse_strict_json`` lets orjson parse a byte text only when the answer is certainly
the stdlib ``json`` parse's (duplicate keys refused, big integers kept as ints, lone
surrogates, ``NaN`` and invalid UTF-8 refused by the same code as before). Each test
compares ``parse_strict_json`` with ``_parse_strict_stdlib`` (the unchanged reference):
the same value, types and float bits included, or the same ``ParseError`` (message and
reason), on valid texts, texts with one change, and texts built from JSON fragments.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from warden.crypto import canonical
from warden.crypto.canonical import parse_strict_json
from warden.errors import ParseError


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``1 != 1.0 != True``, ``-0.0``)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _outcome(parse: Any, raw: bytes, **kw: Any) -> tuple[str, Any]:
    try:
        return "value", parse(raw, **kw)
    except ParseError as exc:
        return "error", (str(exc), exc.reason)


def _check(raw: bytes) -> None:
    for finite in (False, True):
        got = _outcome(parse_strict_json, raw, finite=finite)
        want = _outcome(canonical._parse_strict_stdlib, raw, finite=finite)
        assert got[0] == want[0], (raw, got, want)
        if got[0] == "value":
            assert _same(got[1], want[1]), (raw, got, want)
        else:
            assert got == want, raw


def test_the_orjson_path_is_taken_for_a_request_like_text() -> None:
    raw = b'{"a":{"value":2500.0},"t":"2026-12-06T20:40:36.922Z","n":[1,-2,3e5,null,true]}'
    assert canonical._orjson_if_same(raw) is not canonical._NOT_SURE
    _check(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":2}',
        b'{"a":{"b":1,"c":2},"a":3}',
        b'{"x":[{"k":1,"k":1}]}',
        b'{"a:":1,"a\\u003a":2}',
        b'{"\\u0061":1,"a":2}',
        b'{"a":"x:y","a":"x"}',
        b'{"k":1,"k":{}}',
        b"18446744073709551616",
        b"18446744073709551615",
        b"-9223372036854775809",
        b"123456789012345678901234567890",
        b"[1e400]",
        b"[-1e400]",
        b"1e-400",
        b"-0",
        b"-0.0",
        b"NaN",
        b"[Infinity]",
        b"-Infinity",
        b'"\\ud800"',
        b'{"\\udc00":1}',
        b'"\\ud83d\\ude00"',
        b'"\xed\xa0\x80"',
        b'"\xc0\xaf"',
        b'"\xff"',
        b"\xef\xbb\xbf{}",
        b'"\x1f"',
        b'"\x7f"',
        b"\x0c1",
        b"[1,]",
        b"01",
        b"1.",
        b".5",
        b"+1",
        b"",
        b" ",
        b"[1]x",
        b"[" * 300 + b"]" * 300,
        b"[" * 2000 + b"]" * 2000,
        b'{"a":' * 300 + b"1" + b"}" * 300,
    ],
)
def test_refusals_and_values_match_the_stdlib_parse(raw: bytes) -> None:
    _check(raw)


def test_duplicate_keys_are_refused_with_the_stdlib_message() -> None:
    with pytest.raises(ParseError, match="duplicate object key 'a'") as info:
        parse_strict_json(b'{"b":{"a":1,"a":2}}')
    assert info.value.reason == "duplicate_key"


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    | st.sampled_from(["a:b", ":", "a", "ab", "\\u003a"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "a:", ":", "é", "k"]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None)
@given(_json, st.booleans())
@example(value={"a": 1, "b": [1.5, -0.0, 2**64]}, ascii_only=True)
def test_dumped_values_parse_alike(value: Any, ascii_only: bool) -> None:
    _check(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8"))


@settings(max_examples=600, deadline=None)
@given(_json, st.data())
def test_texts_with_a_member_repeated_or_a_byte_changed_parse_alike(
    value: Any, data: st.DataObject
) -> None:
    raw = json.dumps(value, ensure_ascii=data.draw(st.booleans())).encode("utf-8")
    at = data.draw(st.integers(min_value=0, max_value=len(raw)))
    insert = data.draw(
        st.sampled_from(
            [b'"a":1,', b'"a":{"a":1},', b",", b":", b'"', b"\\", b"0", b"e", b"-", b"\xff"]
        )
        | st.binary(max_size=3)
    )
    _check(raw[:at] + insert + raw[at:])
    if raw.startswith(b"{") and len(raw) > 2:
        _check(b'{"a":0,' + raw[1:])  # a duplicate whenever the object has "a"


_fragments = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b" ",
        b"\t",
        b"\n",
        b"\x0c",
        b'"a"',
        b'"a:b"',
        b'"\\u003a"',
        b'"\\u003A"',
        b'"\\ud800"',
        b'"\\udfff\\ud800"',
        b'"\\ud83d\\ude00"',
        b'"\\x"',
        b'"\\/"',
        b'"\x01"',
        b"\xef\xbb\xbf",
        b"\xed\xa0\x80",
        b"\xc3\xa9",
        b"\xff",
        b"0",
        b"1",
        b"9",
        b"-",
        b"+",
        b".",
        b"e",
        b"E",
        b"e-",
        b"e+",
        b"1e400",
        b"1e-400",
        b"9007199254740993",
        b"18446744073709551616",
        b"4.9e-324",
        b"2.2250738585072011e-308",
        b"null",
        b"true",
        b"false",
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"nul",
    ]  # fmt: skip
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_fragments, max_size=14))
@example([b"{", b'"a"', b":", b"1", b",", b'"a"', b":", b"2", b"}"])
@example([b"[", b"18446744073709551616", b"]"])
def test_texts_of_json_fragments_parse_alike(parts: list[bytes]) -> None:
    _check(b"".join(parts))


_float_token = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-"]),
    st.from_regex(r"\A(0|[1-9][0-9]{0,20})\Z"),
    st.sampled_from([""]) | st.from_regex(r"\A\.[0-9]{1,24}\Z"),
    st.sampled_from([""]) | st.from_regex(r"\A[eE][+-]?[0-9]{1,4}\Z"),
)


@settings(max_examples=2000, deadline=None)
@given(_float_token)
@example("0.1")
@example("2.2250738585072011e-308")
@example("9007199254740993.0")
@example("1.7976931348623157e308")
@example("1.7976931348623159e308")
def test_numbers_parse_alike(token: str) -> None:
    _check(token.encode())
    _check(f'{{"n":[{token}]}}'.encode())


@settings(max_examples=1000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_reprs_parse_to_the_same_double(x: float) -> None:
    raw = repr(x).encode()
    _check(raw)
    value = parse_strict_json(raw)
    assert value == x and math.copysign(1.0, value) == math.copysign(1.0, x)


def test_orjson_still_keeps_the_last_duplicate() -> None:
    """What the colon count guards against: if orjson ever refuses duplicates itself, the
    guard is still right, but this says its reason changed."""
    assert orjson.loads(b'{"a":1,"a":2}') == {"a": 2}


def test_a_bytes_subclass_takes_the_stdlib_path() -> None:
    class Body(bytes):
        pass

    raw = Body(b'{"a":1,"a":2}')
    with pytest.raises(ParseError, match="duplicate object key 'a'"):
        parse_strict_json(raw)
    assert parse_strict_json(Body(b'{"a":[1.5]}')) == {"a": [1.5]}
