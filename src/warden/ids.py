"""Random identifiers on the hot path."""

from __future__ import annotations

import os

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
