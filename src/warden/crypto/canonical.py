"""Strict JSON parsing and RFC 8785 (JCS) canonical bytes.

ACS signs and hashes the JCS form of envelopes (spec §10, §8.2), so every byte
string Warden hashes comes from :func:`canonical_bytes`. Input is parsed strictly
(:func:`parse_strict_json`): duplicate keys, ``NaN``/``Infinity`` tokens and
invalid UTF-8 are refused, because two parties that read the same bytes
differently cannot agree on a signature.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

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


def parse_strict_json(raw: bytes | str) -> Any:
    """Parse JSON text strictly.

    Raises :class:`~warden.errors.ParseError` for invalid UTF-8, invalid JSON,
    duplicate object keys and ``NaN``/``Infinity``/``-Infinity`` tokens.
    Numbers outside the JCS domain (``1e400``, integers beyond 2^53) parse here
    and are refused by :func:`canonical_bytes`.
    """
    try:
        text = raw.decode("utf-8", errors="strict") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ParseError("body is not valid UTF-8", reason="invalid_utf8") from exc
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except ParseError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"invalid JSON: {exc}", reason="invalid_json") from exc


_MAX_SAFE_INT = 2**53 - 1
_fast_dumps = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
).encode


def is_fast_canonical(value: Any) -> bool:
    """True when ``json.dumps(sort_keys=True)`` is byte-identical to JCS for ``value``.

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


def canonical_bytes(value: Any, *, known_fast: bool = False) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    Values without floats (the common case for ACS envelopes) take a verified
    fast path through the C JSON encoder; everything else goes through the
    ``rfc8785`` library. tests/crypto/test_canonical.py checks both agree.
    ``known_fast`` skips the walk when the caller already checked a value that
    contains this one with :func:`is_fast_canonical`.

    Raises :class:`~warden.errors.InvalidRequest` (reason ``jcs_domain``) when the
    value cannot be canonicalized: non-finite floats, integers outside
    ±(2^53 − 1), lone surrogates, or non-JSON types.
    """
    if known_fast or is_fast_canonical(value):
        try:
            return _fast_dumps(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # lone surrogate: let rfc8785 produce the domain error below
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError, TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"value is outside the RFC 8785 (JCS) domain: {exc}", reason="jcs_domain"
        ) from exc


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
