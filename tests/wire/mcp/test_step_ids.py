"""The ids and timestamps every ACS step of the proxy makes are what the standard
library made (docs/decisions.md 880, 881)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from unittest import mock

from warden import timestamps
from warden.ids import uuid4_text
from warden.wire.acs.client import now_rfc3339


def test_uuid4_text_is_a_version_4_uuid_in_its_canonical_text() -> None:
    seen = set()
    ones, zeros = 0, -1
    for _ in range(4000):
        text = uuid4_text()
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lowercase 8-4-4-4-12, as str(uuid.uuid4())
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        seen.add(text)
        ones |= parsed.int
        zeros &= parsed.int
    assert len(seen) == 4000
    # Every bit but the six fixed ones takes both values: 122 random bits.
    fixed = (0xF000 << 64) | (0xC000 << 48)
    assert ones | fixed == (1 << 128) - 1
    assert zeros & ~fixed & ((1 << 128) - 1) == 0


def test_uuid4_text_uses_the_bytes_uuid4_would_use() -> None:
    raw = bytes(range(16))
    with mock.patch("os.urandom", return_value=raw):
        expected = str(uuid.uuid4())
        assert uuid4_text() == expected


def _stdlib() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_now_rfc3339_reads_as_datetime_now() -> None:
    for _ in range(2000):
        before, now, after = _stdlib(), now_rfc3339(), _stdlib()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", now)
        assert before <= now <= after


def test_now_rfc3339_formats_each_second_anew() -> None:
    for ns in (0, 999_999_999, 1_000_000_000, 1_765_000_000_123_456_789, 4_102_444_799_999_000_000):
        with mock.patch.object(timestamps.time, "time_ns", return_value=ns):
            seconds, rest = divmod(ns, 10**9)
            at = datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)
            assert now_rfc3339() == at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
