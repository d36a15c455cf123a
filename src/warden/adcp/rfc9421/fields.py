"""Structured Field parsing (RFC 8941, with ``http-sf``) of the three fields the AdCP
RFC 9421 profile reads: ``Signature-Input``, ``Signature`` and ``Content-Digest``.

Two binary encodings exist on the wire (request-signing README, "Binary header
values"; webhook-signing README, "Relationship to the request-signing vectors"):

- **strict** (AdCP 3.2 request profile): RFC 8941 ``sf-binary``, standard Base64 with
  its padding. ``-``/``_`` or a missing ``=`` is malformed.
- **legacy** (AdCP 3.1 requests, webhook-v1 throughout 3.x): each ``:…:`` token may be
  unpadded Base64URL *or* standard Base64 — but one token mixing the two alphabets is
  malformed (webhook negative 021). Legacy tokens are rewritten to standard Base64
  before ``http-sf`` parses them; the field text itself (what the signature base
  quotes) is never changed.

A dictionary with a repeated key is malformed (RFC 8941 §3.2 lets a parser reject it;
the profile requires it: negative vectors 021 and 023).
"""

from __future__ import annotations

import re
from typing import Any

import http_sf

_BINARY = re.compile(r":([^:\s,;]*):")
_STD = frozenset("+/")
_URL = frozenset("-_")


class FieldMalformed(ValueError):
    """A field is not the Structured Field it must be (``*_header_malformed``)."""


def _reject_duplicate(key: str, context: str) -> None:
    raise FieldMalformed(f"repeated {context} key {key!r}")


def _binary_tokens(text: str, legacy: bool) -> str:
    def fix(m: re.Match[str]) -> str:
        token = m.group(1)
        chars = set(token)
        if legacy:
            if chars & _STD and chars & _URL:
                raise FieldMalformed("a binary value mixes the base64url and base64 alphabets")
            token = token.translate(str.maketrans("-_", "+/")).rstrip("=")
            return ":" + token + "=" * (-len(token) % 4) + ":"
        if chars & _URL:
            raise FieldMalformed("a binary value uses base64url; sf-binary is standard Base64")
        if len(token) % 4:
            raise FieldMalformed("a binary value lacks its Base64 padding")
        return m.group(0)

    return _BINARY.sub(fix, text)


def parse_dictionary(text: str, *, legacy: bool, binary: bool) -> dict[str, Any]:
    """``text`` as an RFC 8941 Dictionary ``{key: (value, params)}``; ``binary`` marks a
    field whose values are byte sequences (``Signature``, ``Content-Digest``), whose
    tokens get the profile's Base64 rule. Raises :class:`FieldMalformed`."""
    if binary:
        text = _binary_tokens(text, legacy)
    try:
        parsed = http_sf.parse(
            text.encode("ascii"), tltype="dictionary", on_duplicate_key=_reject_duplicate
        )
    except FieldMalformed:
        raise
    except (ValueError, UnicodeEncodeError) as exc:  # StructuredFieldError is a ValueError
        raise FieldMalformed(f"not a Structured Field dictionary: {exc}") from None
    if not isinstance(parsed, dict):  # pragma: no cover - tltype fixes the shape
        raise FieldMalformed("not a dictionary")
    return parsed


def serialize_member(member: Any) -> str:
    """The RFC 8941 serialization of one dictionary member (``(…);params``): the
    ``@signature-params`` value (RFC 9421 §2.3)."""
    text = http_sf.ser({"x": member})
    return text[2:]


def serialize_dictionary(members: dict[str, Any]) -> str:
    return http_sf.ser(members)
