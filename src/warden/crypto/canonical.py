"""Strict JSON parsing and RFC 8785 (JCS) canonical bytes.

ACS signs and hashes the JCS form of envelopes (spec §10, §8.2), so every byte
string Warden hashes comes from :func:`canonical_bytes`. Input is parsed strictly
(:func:`parse_strict_json`): duplicate keys, ``NaN``/``Infinity`` tokens and
invalid UTF-8 are refused, because two parties that read the same bytes
differently cannot agree on a signature. Request bodies are read with
:func:`parse_request_json`, which also refuses nesting deeper than
:data:`MAX_REQUEST_DEPTH` and lone surrogate escapes (docs/decisions.md 185–186).
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import partial
from itertools import accumulate
from typing import Any

import orjson
import rfc8785

from warden.crypto.jcs_fast import JcsRoute, fast_jcs_bytes
from warden.errors import InvalidRequest, ParseError


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ParseError(f"duplicate object key {key!r}", reason="duplicate_key")
        obj[key] = value
    return obj


def _no_constants(token: str) -> Any:
    raise ParseError(f"non-standard JSON token {token}", reason="non_standard_number")


#: The deepest nesting of arrays and objects a request body may have. Far above any
#: envelope, plan or tool argument seen (single digits), far below what breaks the
#: parser (Python's recursion limit, ~1000) or the schema validator (jsonschema-rs
#: gives up past 255); serde_json's default limit too (docs/decisions.md 185).
MAX_REQUEST_DEPTH = 128

# A JSON string token (escapes included), to blank strings out before counting brackets.
_STRING_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
# A \uD800–\uDFFF escape: the only way a JSON text can carry a surrogate code point.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# Built with chr(): mypyc refuses a lone surrogate in a string literal (decision 1160).
_SURROGATE = re.compile("[" + chr(0xD800) + "-" + chr(0xDFFF) + "]")


def nesting_exceeds(raw: bytes, limit: int) -> bool:
    """True when the JSON text ``raw`` nests arrays/objects deeper than ``limit``.

    Counted on the bytes, before parsing, so a hostile body never reaches the
    recursive parser: strings are blanked out, then brackets are counted. Linear
    in ``len(raw)``; a body with at most ``limit`` opening brackets is not scanned.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _STRING_TOKEN.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(_STEP[b] for b in brackets), default=0) > limit


def lone_surrogate_at(value: Any) -> str | None:
    """The RFC 6901 pointer of the first string or member name of ``value`` that holds
    a lone surrogate (``"\\ud800"`` decodes to one), or None.

    Valid surrogate pairs are joined by the parser, so any surrogate left is lone:
    such a string is not Unicode text (RFC 8259 §8.2, RFC 7493 §2.1), cannot be
    written as UTF-8 and is outside the JCS domain.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return at or "/"
        elif isinstance(v, dict):
            for k, x in v.items():
                here = f"{at}/{_pointer_token(k)}"
                if _SURROGATE.search(k):
                    return at or "/"
                stack.append((x, here))
        elif isinstance(v, list):
            stack.extend((x, f"{at}/{i}") for i, x in enumerate(v))
    return None


def number_outside_jcs_at(value: Any, at: str = "") -> str | None:
    """The RFC 6901 pointer (``at`` + the path inside ``value``) of the first number in
    ``value`` outside the RFC 8785 domain — a non-finite float (``1e400`` parsed without
    ``finite``), or an integer beyond ±(2^53−1) that is not the JCS form of a double, as
    :func:`canonical_bytes` refuses them — or None. Strings are not checked."""
    stack: list[tuple[Any, str]] = [(value, at)]
    while stack:
        v, here = stack.pop()
        t = type(v)
        if t is int:
            if not -_MAX_SAFE_INT <= v <= _MAX_SAFE_INT:
                try:
                    canonical_bytes(v)
                except InvalidRequest:
                    return here
        elif t is float:
            if v - v != 0.0:  # inf or nan
                return here
        elif t is dict:
            stack.extend((x, f"{here}/{_pointer_token(k)}") for k, x in v.items())
        elif t is list:
            stack.extend((x, f"{here}/{i}") for i, x in enumerate(v))
    return None


def jcs_domain_error(exc: InvalidRequest, value: Any) -> InvalidRequest:
    """``exc`` (a ``jcs_domain`` refusal of ``value``) naming the number it is about, by
    its message and ``pointer``; ``exc`` itself when no number is at fault (a lone
    surrogate, a type JSON has not), docs/decisions.md 1201."""
    at = number_outside_jcs_at(value)
    if at is None:
        return exc
    return InvalidRequest(f"{exc.message} (the number at {at})", reason=exc.reason, pointer=at)


def _pointer_token(key: str) -> str:
    # A key holding a lone surrogate is reported by its parent, never printed.
    return key.replace("~", "~0").replace("/", "~1")


def may_hold_surrogates(raw: bytes) -> bool:
    """False when the JSON text ``raw`` certainly decodes to no surrogate code point
    (it has no ``\\uD800``–``\\uDFFF`` escape); a cheap guard before
    :func:`lone_surrogate_at`."""
    return b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None


def parse_request_json(
    raw: bytes | str, *, max_depth: int = MAX_REQUEST_DEPTH, finite: bool = False
) -> Any:
    """Parse a request body: :func:`parse_strict_json` with the request limits.

    Raises :class:`~warden.errors.ParseError` as :func:`parse_strict_json` does (with
    ``finite`` as it takes it), and also for nesting deeper than ``max_depth`` (default
    :data:`MAX_REQUEST_DEPTH`; reason ``too_deep``) and
    for a string or member name holding a lone surrogate (reason ``lone_surrogate``;
    the message names its JSON pointer, never its text).
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    value = parse_strict_json(raw, max_depth=max_depth, finite=finite)
    if may_hold_surrogates(data):
        at = lone_surrogate_at(value)
        if at is not None:
            raise ParseError(
                f"the string at {at} holds a lone surrogate escape (\\uD800–\\uDFFF "
                "without its pair): not Unicode text",
                reason="lone_surrogate",
            )
    return value


def _finite_float(token: str) -> float:
    value = float(token)
    if value - value != 0.0:  # inf - inf is nan; nan is never a token here
        raise ParseError(
            f"the number {token[:40]} overflows a double (it reads as infinity)",
            reason="non_standard_number",
        )
    return value


def parse_strict_json(
    raw: bytes | str, *, max_depth: int | None = None, finite: bool = False
) -> Any:
    """Parse JSON text strictly.

    Raises :class:`~warden.errors.ParseError` for invalid UTF-8, invalid JSON,
    duplicate object keys, ``NaN``/``Infinity``/``-Infinity`` tokens, and (with
    ``max_depth``) arrays/objects nested deeper than ``max_depth`` (reason
    ``too_deep``). Numbers outside the JCS domain (``1e400``, integers that are not
    IEEE doubles) parse here and are refused by :func:`canonical_bytes`; with
    ``finite``, a number that overflows a double (``1e400``) is refused here too
    (reason ``non_standard_number``, as for an ``Infinity`` token).
    """
    if max_depth is not None:
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        if nesting_exceeds(data, max_depth):
            raise ParseError(
                f"arrays and objects are nested deeper than {max_depth} levels",
                reason="too_deep",
            )
    if type(raw) is bytes:  # not a subclass: orjson's own type checks decide those
        value = _orjson_if_same(raw)
        if value is not _NOT_SURE:
            return value
    return _parse_strict_stdlib(raw, finite=finite)


#: Bytes that are not an ASCII digit become 1, digits 0: a run of 19 zero bytes in the
#: translation is a run of 19 digits in the text.
_DIGITS_TO_ZERO = bytes(0 if 0x30 <= b <= 0x39 else 1 for b in range(256))
_NINETEEN_DIGITS = bytes(19)
_NOT_SURE = object()


def _orjson_if_same(raw: bytes) -> Any:
    """orjson's value for the JSON text ``raw`` when it is certainly what the stdlib
    parse of :func:`_parse_strict_stdlib` returns, else ``_NOT_SURE`` (docs/decisions.md 890).

    orjson refuses invalid UTF-8, a byte-order mark, ``NaN``/``Infinity``, numbers that
    overflow a double, lone surrogate escapes and control characters, all of which the
    stdlib path refuses or answers otherwise: any refusal here leaves the decision to it.
    What orjson accepts differently is excluded: duplicate member names (it keeps the
    last) and integers beyond 64 bits (it makes them floats). A member name is followed
    by one structural ``:``; a colon inside a string is one byte in the text and in
    orjson's output alike unless written ``\\u003a``. So with no ``\\u003`` in ``raw``,
    ``raw`` holds as many colons as the compact text of what orjson kept, and exactly
    when it dropped no member: a dropped member takes its own colon with it. Any run of
    19 digits (every integer orjson would make a float has one) also answers not sure.
    """
    if raw.find(b"\\u003") != -1 or raw.translate(_DIGITS_TO_ZERO).find(_NINETEEN_DIGITS) != -1:
        return _NOT_SURE
    try:
        value = orjson.loads(raw)
        # Raises past orjson's 255 levels of nesting, which its parser takes.
        kept = orjson.dumps(value)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return _NOT_SURE
    return value if raw.count(b":") == kept.count(b":") else _NOT_SURE


def _parse_strict_stdlib(raw: bytes | str, *, finite: bool) -> Any:
    """The strict parse by the stdlib's ``json``: the reference :func:`_orjson_if_same`
    stands in for, and the path of every text it is not sure of."""
    try:
        text = raw.decode("utf-8", errors="strict") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ParseError("body is not valid UTF-8", reason="invalid_utf8") from exc
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
            parse_float=_finite_float if finite else None,
        )
    except ParseError:
        raise
    except RecursionError as exc:
        raise ParseError(
            "invalid JSON: arrays and objects are nested too deeply", reason="too_deep"
        ) from exc
    except ValueError as exc:
        raise ParseError(f"invalid JSON: {exc}", reason="invalid_json") from exc


_MAX_SAFE_INT = 2**53 - 1
#: Compact, sorted UTF-8 (the fast path's encoder, :mod:`warden.crypto.jcs_fast`).
_fast_dumps = partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)


def is_fast_canonical(value: Any) -> bool:
    """True when the sorted compact encoding (orjson's, or ``json.dumps(sort_keys=True)``'s)
    is byte-identical to JCS for ``value``
    and ``value`` holds no float (the narrower, float-free predicate;
    :func:`~warden.crypto.jcs_fast.is_direct_jcs` also admits the floats the encoder
    writes as JCS does).

    That holds for dicts with str keys below U+D800 (code-point order equals
    UTF-16 order there), lists, strings, bools, None and ints within ±(2^53−1):
    no floats, whose ECMAScript formatting differs from Python's repr.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is bool or v is None:
            continue
        if t is int:
            if -_MAX_SAFE_INT <= v <= _MAX_SAFE_INT:
                continue
            return False
        if t is dict:
            for k in v:
                if type(k) is not str or (not k.isascii() and max(map(ord, k)) >= 0xD800):
                    return False
            stack.extend(v.values())
            continue
        if t is list:
            stack.extend(v)
            continue
        return False
    return True


def canonical_bytes(
    value: Any, *, known_fast: bool = False, within: JcsRoute | None = None
) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    Almost every value takes the fast path of :mod:`warden.crypto.jcs_fast`: one walk
    that checks the value, then orjson's encoder, floats included (their
    ECMAScript text is placed where the encoder's differs). Only what that path cannot
    be sure of (NaN/Infinity, integers beyond ±(2^53 − 1), non-JSON types, lone
    surrogates, nesting too deep for the encoder) goes through the ``rfc8785``
    library, which decides and raises. tests/crypto/test_canonical.py and
    tests/crypto/test_jcs_fast.py check both agree byte for byte.
    ``known_fast`` skips the walk when the caller already checked a value that
    contains this one with :func:`is_fast_canonical` or
    :func:`~warden.crypto.jcs_fast.is_direct_jcs`; ``within`` (a
    :class:`~warden.crypto.jcs_fast.JcsRoute` that :func:`~warden.crypto.jcs_fast.jcs_route`
    found for a value containing this one) skips it too, for any route but ``UNSURE``.

    JCS numbers are IEEE-754 doubles written as ECMAScript writes them (RFC 8785
    §3.2.2.3): below 10^21 an integral double is plain digits, so a JCS signer sends
    ``100000000000000000000`` for 1e20. An integer beyond ±(2^53 − 1) is in the domain
    when it is exactly that spelling of a double (its canonical text is its own
    digits, so the number Warden evaluates is the number signed); any other
    (``9007199254740993``, which every JCS peer reads and re-signs as ...992) is not
    (docs/decisions.md 192).

    Raises :class:`~warden.errors.InvalidRequest` (reason ``jcs_domain``) when the
    value cannot be canonicalized: non-finite floats, integers beyond ±(2^53 − 1)
    that are not the RFC 8785 spelling of a double, lone surrogates, or non-JSON types.
    """
    if known_fast or within is JcsRoute.DIRECT:
        try:
            return _fast_dumps(value)
        except orjson.JSONEncodeError:
            pass  # lone surrogate or too deep: let rfc8785 produce the domain error below
    else:
        fast = fast_jcs_bytes(value, within=within)
        if fast is not None:
            return fast
    try:
        return rfc8785.dumps(_as_doubles(value))
    except (
        rfc8785.CanonicalizationError,
        UnicodeError,
        TypeError,
        ValueError,
        RecursionError,
    ) as exc:
        raise InvalidRequest(
            f"value is outside the RFC 8785 (JCS) domain: {exc}", reason="jcs_domain"
        ) from exc


def _as_doubles(value: Any) -> Any:
    """``value`` with every integer beyond ±(2^53 − 1) replaced by the double it spells
    (copies only the containers on the way to one); ValueError for an integer whose
    digits are not what RFC 8785 writes for that double (its canonical text would
    differ from it), or one too large for a double."""
    t = type(value)
    if t is int:
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            return value
        try:
            double = float(value)
        except OverflowError as exc:
            raise ValueError("integer too large for an IEEE-754 double") from exc
        if rfc8785.dumps(double) != str(value).encode("ascii"):
            raise ValueError(
                "integer beyond 2^53 that is not the RFC 8785 form of a double (a JCS peer "
                "would read and sign another number)"
            )
        return double
    if t is dict:
        out = {k: _as_doubles(v) for k, v in value.items()}
        return out if any(out[k] is not value[k] for k in out) else value
    if t is list:
        items = [_as_doubles(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
