"""The RFC 8785 (JCS) fast path: JCS bytes from orjson's encoder, floats included.

:func:`warden.crypto.canonical.canonical_bytes` tries :func:`fast_jcs_bytes` first and
uses the pure-Python ``rfc8785`` library only when it answers None. Why orjson
(``orjson.dumps(value, option=OPT_SORT_KEYS)``, compact UTF-8) can write JCS
(RFC 8785 §3.2); the stdlib's C encoder
(``json.dumps(ensure_ascii=False, sort_keys=True, separators=(",", ":"))``) writes the
same bytes for these values, an order of magnitude slower (decision 271):

- strings (§3.2.2.2): it escapes exactly ``"``, ``\\``, and U+0000–U+001F, the latter
  as ``\\b \\f \\n \\r \\t`` or lowercase ``\\u00xx``, and writes everything else as
  UTF-8 — the JCS rules; a lone surrogate is refused (then ``rfc8785`` decides);
- member order (§3.2.3): it sorts by UTF-8 bytes, which is code-point order, which is
  UTF-16 code-unit order unless a key holds a character beyond U+FFFF (its
  surrogates sort below U+E000–U+FFFF); such objects are sorted here by UTF-16 code
  units instead and written in that order;
- numbers (§3.2.2.3): it writes the shortest round-trip digits, the same ECMAScript
  takes, but places the point and spells the exponent differently
  (:mod:`warden.crypto.ecmascript_number`). For a non-integral double ``x`` with
  ``1e-3 ≤ |x| < 1e15`` the two texts are identical, so such values are written as
  they are. Any other finite double is rewritten before encoding: an integral one
  below 2^53 becomes the Python int (``1500.0`` → ``1500``), one that orjson already
  writes as ECMAScript does (``5e-324``) stays, and the rest (``2.0**60`` →
  ``1152921504606847000``, ``1e-07`` → ``1e-7``, ``1e21`` → ``1e+21``, ``1.5e-05`` →
  ``0.000015``) are written through a placeholder string replaced in the output.

The fast path answers None ("not sure"; ``rfc8785`` decides, and raises its domain
errors) for: NaN and ±Infinity, integers beyond ±(2^53 − 1) (their domain rule is in
``canonical._as_doubles``), types other than exact ``dict``/``list``/``str``/``int``/
``float``/``bool``/``None`` (subclasses included), non-string keys, strings that
cannot be UTF-8 (lone surrogates), values too deeply nested for the encoder, and a
placeholder that also occurs in the caller's data (docs/decisions.md 290–291).
"""

from __future__ import annotations

import secrets
from enum import IntEnum
from functools import partial
from typing import Any, Final

import orjson

from warden.crypto.ecmascript_number import ecmascript_number

_MAX_SAFE_INT: Final = 2**53 - 1

#: orjson writes these doubles as ECMAScript does (see the module docstring).
_DIRECT_LOW: Final = 1e-3
_DIRECT_HIGH: Final = 1e15


class JcsRoute(IntEnum):
    """How :func:`fast_jcs_bytes` writes a value, as :func:`jcs_route` finds it;
    ordered from cheapest to "not sure"."""

    DIRECT = 0  # the encoder's output for the value as it is, is its JCS
    NUMBERS = 1  # JCS once some floats are rewritten (objects still sorted by the encoder)
    ORDER = 2  # also an object with a key beyond U+FFFF: sorted here, by UTF-16 code units
    UNSURE = 3  # the fast path is not sure: rfc8785 writes it or raises


# Module names for the walk (an enum member's attribute lookup costs more).
_DIRECT: Final = JcsRoute.DIRECT
_NUMBERS: Final = JcsRoute.NUMBERS
_ORDER: Final = JcsRoute.ORDER
_UNSURE: Final = JcsRoute.UNSURE

_MAX_EXACT: Final = float(2**53)  # below it an integral double's digits are its ECMAScript text

#: Compact UTF-8 with sorted members / in the dicts' own order (see the module docstring).
_sorted_dumps = partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)
_ordered_dumps = orjson.dumps

# A per-process nonce makes a placeholder unguessable; the count check in
# _placed keeps the output right even if caller data held one anyway.
_PLACEHOLDER_STEM: Final = f"\x00jcs-number-{secrets.token_hex(8)}-"


def jcs_route(value: Any) -> JcsRoute:
    """How the fast path would write ``value`` (one iterative walk, no copy).

    Anything but ``UNSURE`` is inside the RFC 8785 domain, lone surrogates apart
    (the walk does not read strings; the encoder refuses them). ``DIRECT`` means
    :func:`is_direct_jcs`.
    """
    return _scan(value)


def is_direct_jcs(value: Any) -> bool:
    """True when the encoder's sorted, compact output for ``value`` is already
    its RFC 8785 form, floats included (see the module docstring for the doubles this
    covers). One iterative walk, no copy; a value that passes may be given to
    :func:`~warden.crypto.canonical.canonical_bytes` with ``known_fast=True``, and so
    may every value inside it. Lone surrogates pass (the encoder refuses them later).
    """
    return _scan(value) is JcsRoute.DIRECT


def parts_route(*values: Any) -> JcsRoute:
    """The route of a value holding exactly ``values`` (under ASCII member names or as
    array items): ``DIRECT`` when each is an exact ``str``, ``bool``, ``None`` or an
    ``int`` within ±(2^53 − 1), which the encoder writes as RFC 8785 does (a lone
    surrogate is still refused by it); otherwise what one walk of them finds. For a
    value assembled from scalars and parts whose routes are known, the route of the
    whole is the largest of its parts' (``max``), so only the unknown parts are walked."""
    for v in values:
        t = type(v)
        if t is str or t is bool or v is None:
            continue
        if t is int and -_MAX_SAFE_INT <= v <= _MAX_SAFE_INT:
            continue
        return _scan(list(values))
    return _DIRECT


def jcs_writable(value: Any, route: JcsRoute) -> tuple[Any, JcsRoute]:
    """``(value to write, its route)`` for ``value`` whose :func:`jcs_route` is ``route``:
    for ``NUMBERS`` when every float the encoder writes wrongly is an integral double
    below 2^53 (``2500.0``), a copy with those floats as ints (only the containers on
    the way to one are copied) and ``DIRECT``; otherwise ``(value, route)``.

    The copy and every value inside it are written by the encoder as they are, as
    ``value`` and the value at the same place in it are by RFC 8785 (the ints are the
    same numbers, the other floats are written alike), so a caller that canonicalizes
    several parts of one walked value converts its floats once, not once per part. The
    copy is for canonicalizing only: ``2500`` is not ``2500.0`` to a policy."""
    if route is not JcsRoute.NUMBERS:
        return value, route
    numbers: list[str] = []
    ready = _with_numbers(value, numbers)
    if numbers:  # a float needs a placeholder: each part is rewritten when written
        return value, route
    return ready, JcsRoute.DIRECT


def fast_jcs_bytes(value: Any, *, within: JcsRoute | None = None) -> bytes | None:
    """The RFC 8785 bytes of ``value``, or None when this fast path cannot be sure of
    them (the module docstring lists when). Never raises for a JSON-like value; a
    deep value the encoder gives up on answers None.

    ``within``: the route :func:`jcs_route` found for a value that contains this one
    (or is it). Any route but ``UNSURE`` holds for every value inside, so the walk is
    skipped and the value is written by that route (a value needing less is written
    the same by a costlier route)."""
    verdict = _scan(value) if within is None or within is JcsRoute.UNSURE else within
    if verdict is JcsRoute.UNSURE:
        return None
    try:
        if verdict is JcsRoute.DIRECT:
            return _sorted_dumps(value)
        numbers: list[str] = []
        if verdict is JcsRoute.NUMBERS:
            text = _sorted_dumps(_with_numbers(value, numbers))
        else:
            text = _ordered_dumps(_in_utf16_order(value, numbers))
        return _placed(text, numbers)
    except orjson.JSONEncodeError:  # a lone surrogate, or nesting beyond orjson's limit
        return None


def _scan(value: Any) -> JcsRoute:
    """Walk ``value`` once and say how the fast path can write it. Iterative, so
    depth costs no recursion. Only containers go on the stack: a container's scalars
    are checked as its members are read (most members are scalars)."""
    verdict: JcsRoute = _DIRECT
    stack: list[Any] = [value if type(value) is dict or type(value) is list else [value]]
    pop, append = stack.pop, stack.append
    while stack:
        members: Any = pop()
        if type(members) is dict:
            for k in members:
                if type(k) is not str:
                    return _UNSURE
                if not k.isascii() and max(map(ord, k)) > 0xFFFF:
                    verdict = _ORDER  # UTF-16 order differs from code-point order
            members = members.values()
        for v in members:
            t = type(v)
            if t is str or t is bool or v is None:
                continue
            if t is dict or t is list:
                append(v)
                continue
            if t is int:
                if -_MAX_SAFE_INT <= v <= _MAX_SAFE_INT:
                    continue
                return _UNSURE
            if t is float:
                if _DIRECT_LOW <= abs(v) < _DIRECT_HIGH and not v.is_integer():
                    continue
                if v - v != 0.0:  # NaN or ±Infinity (x − x is NaN for both)
                    return _UNSURE
                if verdict is _DIRECT:
                    verdict = _NUMBERS
                continue
            return _UNSURE
    return verdict


def _placed(text: bytes, numbers: list[str]) -> bytes | None:
    """``text`` with each placeholder replaced by its number's text (``numbers[i]``
    for placeholder ``i``); None when a placeholder is not there exactly once (the
    caller's data holds it too, so replacing could change their string)."""
    for index, number in enumerate(numbers):
        token = _ordered_dumps(f"{_PLACEHOLDER_STEM}{index}\x00")
        if text.count(token) != 1:
            return None
        text = text.replace(token, number.encode("ascii"))
    return text


def _with_numbers(value: Any, numbers: list[str]) -> Any:
    """``value`` with every float the encoder would write wrongly replaced (see
    :func:`_writable`); copies only the containers on the way to one."""
    t = type(value)
    if t is float:
        return _writable(value, numbers)
    if t is dict:
        out = None
        for k, v in value.items():
            tv = type(v)
            if tv is float or tv is dict or tv is list:
                w = _with_numbers(v, numbers)
                if w is not v:
                    if out is None:
                        out = dict(value)
                    out[k] = w
        return value if out is None else out
    if t is list:
        items = None
        for i, v in enumerate(value):
            tv = type(v)
            if tv is float or tv is dict or tv is list:
                w = _with_numbers(v, numbers)
                if w is not v:
                    if items is None:
                        items = list(value)
                    items[i] = w
        return value if items is None else items
    return value


def _in_utf16_order(value: Any, numbers: list[str]) -> Any:
    """A copy of ``value`` whose objects are in UTF-16 key order (for an encoder that
    does not sort) and whose floats are rewritten as by :func:`_with_numbers`."""
    t = type(value)
    if t is dict:
        keys = sorted(value) if all(k.isascii() for k in value) else sorted(value, key=_utf16)
        return {k: _in_utf16_order(value[k], numbers) for k in keys}
    if t is list:
        return [_in_utf16_order(v, numbers) for v in value]
    if t is float:
        return _writable(value, numbers)
    return value


def _writable(value: float, numbers: list[str]) -> Any:
    """What to give the encoder for the finite double ``value``: ``value`` when orjson
    writes it as ECMAScript does, the int for an integral double below 2^53, else a
    placeholder whose text is appended to ``numbers``."""
    if -_MAX_EXACT < value < _MAX_EXACT and value.is_integer():
        return int(value)  # below 2^53 the shortest digits are the integer's own
    text = ecmascript_number(value)
    if text.encode("ascii") == _ordered_dumps(value):
        return value
    # Everything else, integral doubles from 2^53 to 10^21 included (their digits can
    # exceed the 64-bit integers orjson writes), through a placeholder.
    numbers.append(text)
    return f"{_PLACEHOLDER_STEM}{len(numbers) - 1}\x00"


def _utf16(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare as the code-unit sequence does (RFC 8785 §3.2.3).
    return key.encode("utf-16-be", "surrogatepass")
