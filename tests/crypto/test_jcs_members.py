"""Objects assembled from their members' canonical bytes equal the whole object's JCS."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from warden.crypto.jcs_members import joined, members
from warden.errors import InvalidRequest

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), _json, max_size=8))
def test_joined_members_are_the_objects_jcs(obj: dict[str, Any]) -> None:
    assert joined(members(obj)) == rfc8785.dumps(obj)


@given(st.dictionaries(st.text(), _json, min_size=1, max_size=8), st.data())
def test_joined_without_a_member_is_the_smaller_objects_jcs(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(obj)))
    rest = {k: v for k, v in obj.items() if k != name}
    assert joined(members(obj), without=name) == rfc8785.dumps(rest)


def test_utf16_order_not_code_point_order() -> None:
    # U+FF61 sorts after U+1F600 by code point but before it by UTF-16 code units.
    obj = {"\uff61": 1, "\U0001f600": 2, "a": 3}
    assert joined(members(obj)) == rfc8785.dumps(obj)
    assert joined(members(obj)).index("\uff61".encode()) > joined(members(obj)).index(b'"a"')


def test_a_member_outside_the_domain_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        members({"n": float("nan")})
