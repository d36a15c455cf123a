"""Random identifiers on the hot path, and how a typed UUID is matched."""

from __future__ import annotations

import os
import re

_VERSION_4 = 0x4000 << 64  # the version nibble (bits 76-79) of a 128-bit UUID
_VARIANT = 0x8000 << 48  # the RFC 4122 variant (bits 62-63: 10)
_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))


def uuid4_text() -> str:
    """``str(uuid.uuid4())``: 122 random bits from ``os.urandom``, the version-4 and
    RFC 4122 variant bits set, in the 8-4-4-4-12 lowercase hex form. The same value
    ``uuid.uuid4`` makes, without building a ``uuid.UUID`` (its checks and properties
    cost ~1.5 µs, and a ``tools/call`` through the proxy makes four: docs/decisions.md
    880)."""
    h = f"{int.from_bytes(os.urandom(16), 'big') & _CLEAR | _VERSION_4 | _VARIANT:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def uuid_key(text: str) -> str | None:
    """The lowercase form of a UUID written as 8-4-4-4-12 hex digits in any case, or None
    for any other text. A UUID is case-insensitive (RFC 9562 §4), so two spellings of
    one are one id to a person typing it (decision 1036)."""
    return text.lower() if _UUID_TEXT.fullmatch(text) else None
