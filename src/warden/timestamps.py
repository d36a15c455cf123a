"""RFC 3339 timestamps in UTC, as ``datetime.now(UTC).isoformat(...)`` writes them with
``Z`` for ``+00:00``, at a fraction of the cost.

The date and time of day are formatted once a second and the fraction is appended:
``datetime.isoformat`` cost ~13,000 instructions on every append and ~1.5 µs on every
signed envelope (docs/decisions.md 872, 881). Both readers take the clock
``datetime.now`` reads (``time.time_ns``), floored to their precision.
"""

from __future__ import annotations

import time

#: ``(second since the epoch, its "YYYY-MM-DDTHH:MM:SS" in UTC)``: the last second
#: formatted (replaced whole, so threads read a consistent pair).
_SECOND: tuple[int, str] = (-1, "")


def _split() -> tuple[str, int]:
    """``("YYYY-MM-DDTHH:MM:SS", nanoseconds into that second)`` for now, in UTC."""
    global _SECOND
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    second = _SECOND
    if second[0] != seconds:
        t = time.gmtime(seconds)
        second = (
            seconds,
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
            f"T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}",
        )
        _SECOND = second
    return second[1], nanos


def utc_millis() -> str:
    """Now as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (``isoformat(timespec="milliseconds")``):
    the timestamp of every signed ACS and AdCP envelope."""
    text, nanos = _split()
    return f"{text}.{nanos // 1_000_000:03d}Z"


def utc_micros() -> str:
    """Now as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (``isoformat(timespec="microseconds")``):
    the stored timestamp of every audit entry."""
    text, nanos = _split()
    return f"{text}.{nanos // 1000:06d}Z"
