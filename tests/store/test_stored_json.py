"""The store's JSON text is the stdlib's, byte for byte (decision 271).

A stored entry's text is its transparency-log leaf, and an export re-creates the leaf
with ``json.dumps(entry, ensure_ascii=False, separators=(",", ":"))`` on the parsed
entry (``tlog/export.py`` ``entry_bytes``); the store writes through orjson where that
gives the same bytes. These tests fail if orjson ever spells a value differently and
the store does not notice.
"""

from __future__ import annotations

import enum
import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from warden.json_text import compact_text as _dumps
from warden.tlog.export import entry_bytes


def _stdlib(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


finite = st.floats(allow_nan=False, allow_infinity=False)
tiny = st.floats(min_value=-1e-4, max_value=1e-4, allow_nan=False).filter(lambda x: x != 0)
integers = st.one_of(st.integers(-(2**70), 2**70), st.integers(-(2**53), 2**53))
leaves = st.one_of(st.none(), st.booleans(), integers, finite, tiny, st.text())
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_stored_text_is_the_stdlib_text_for_every_json_value(value: Any) -> None:
    assert _dumps(value) == _stdlib(value)


@given(st.one_of(finite, tiny))
def test_every_double_is_spelled_as_the_stdlib_spells_it(x: float) -> None:
    assert _dumps({"amount": x, "list": [x]}) == _stdlib({"amount": x, "list": [x]})


def test_the_spellings_orjson_differs_on_fall_back_to_the_stdlib() -> None:
    class Colour(enum.IntEnum):
        RED = 1

    class Name(str):
        pass

    for value in (
        1e-05,  # orjson: 0.00001
        9.99e-05,
        [0.0000123],
        10**20,  # beyond orjson's 64-bit integers
        {1: "int key"},  # the stdlib writes "1"
        Colour.RED,
        {"k": Name("v")},
        "0.0000 in a string",
    ):
        assert _dumps(value) == _stdlib(value), value


def test_an_entry_reread_reproduces_its_stored_leaf_bytes() -> None:
    entry = {
        "entry_hash": "ab" * 32,
        "params": {"amount_usd": {"value": 2500.0}, "rate": 1.5e-07, "n": 2**60, "é": "ü\u2028"},
        "verdict": {"decision": "ask", "tiny": math.ulp(0.0)},
    }
    stored = _dumps(entry)
    assert entry_bytes(json.loads(stored)) == stored.encode("utf-8")
