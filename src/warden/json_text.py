"""Compact JSON text, exactly as ``json.dumps(value, ensure_ascii=False,
separators=(",", ":"))`` writes it, faster (decisions 271 and 662).

The stdlib's text is the reference: a stored entry's text is its transparency-log leaf,
and an export re-creates the leaf with that ``json.dumps`` call on the parsed entry
(``tlog/export.py`` ``entry_bytes``); the ACS wire's answers keep their bytes. orjson
writes the same bytes an order of magnitude faster for almost every value, so it writes
first and its output is checked for what it spells differently:

- doubles below 1e-4 (orjson ``0.00001`` and ``1e-7``, the stdlib ``1e-05``, ``1e-07``):
  a ``0.0000`` or a one-digit negative exponent in the output sends the value to the
  stdlib;
- NaN and ±Infinity (orjson ``null``, the stdlib ``NaN``): any ``null`` in the output
  does (Warden's stored documents and answers omit absent members instead of writing
  null, so this costs nothing on the decision path);
- what orjson refuses — integers beyond 64 bits, non-str keys, a lone surrogate — and
  what it would write but the stdlib handles its own way (subclasses of the JSON
  types, dataclasses, datetimes: passed through to fail) go to the stdlib too.

A string that merely looks like one of those spellings takes the stdlib's path as well,
harmlessly. tests/store/test_stored_json.py and tests/server/test_http_serving.py check
the two agree (hypothesis: every double, arbitrary JSON values).
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

#: Python objects orjson would write that the stdlib writes its own way or refuses.
_STDLIB_TYPES_ONLY: Final = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _one_digit_exponent(text: bytes) -> bool:
    """True when ``text`` (compact JSON) holds a number with a one-digit negative
    exponent, as orjson spells ``1e-7``: a digit, ``e-``, one digit, then the number's
    end (``,``, ``]``, ``}`` or the text's). Ids such as ``…3e-4f…`` do not count. A find
    loop: a regular expression over the whole text cost tens of µs per entry."""
    i = text.find(b"e-")
    while i != -1:
        end = i + 3
        if (
            i > 0
            and end <= len(text)
            and 48 <= text[i - 1] <= 57
            and 48 <= text[i + 2] <= 57
            and (end == len(text) or text[end] in b",]}")
        ):
            return True
        i = text.find(b"e-", i + 2)
    return False


def _orjson_if_same(value: Any) -> bytes | None:
    """orjson's bytes for ``value`` when they are the stdlib's, else None."""
    try:
        text = orjson.dumps(value, option=_STDLIB_TYPES_ONLY)
    except orjson.JSONEncodeError:
        return None
    # ``find``, not ``in``: ``bytes.__contains__`` first tries its operand as an integer
    # and formats the TypeError it then discards (~1,800 instructions a test, decision 872).
    if text.find(b"0.0000") != -1 or text.find(b"null") != -1 or _one_digit_exponent(text):
        return None
    return text


def compact_bytes(value: Any) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` as UTF-8 bytes
    (raises as that would: ``TypeError`` for what JSON cannot hold, ``UnicodeEncodeError``
    for a lone surrogate)."""
    text = _orjson_if_same(value)
    if text is not None:
        return text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def compact_text(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, the same str
    (lone surrogates included)."""
    text = _orjson_if_same(value)
    if text is not None:
        return text.decode("utf-8")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
