"""Geometry of the operator pages' charts, drawn as inline SVG by the templates.

The desk's Content-Security-Policy allows no script and no inline style, so charts are
plain ``<svg>`` elements the server computes: this module turns counts into
coordinates (user units of the SVG ``viewBox``) and the templates print them (every
label is escaped by Jinja's autoescape). Colours come from classes in ``desk.css``
(``o-allow``, ``o-deny`` …), never ``style`` attributes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Bar:
    """One rectangle: position and size in viewBox units, its CSS class and the
    tooltip text (SVG ``<title>``)."""

    x: float
    y: float
    w: float
    h: float
    css: str
    title: str


@dataclass(frozen=True)
class Tick:
    x: float
    y: float
    label: str


@dataclass(frozen=True)
class StackedChart:
    width: int
    height: int
    bars: list[Bar]
    ticks: list[Tick]
    max_total: int
    baseline: float


def stacked_columns(
    labels: Sequence[str],
    counts: dict[str, Counter[str]],
    order: Sequence[str],
    *,
    width: int = 720,
    height: int = 200,
    tick_every: int = 10,
) -> StackedChart:
    """One column per label, stacked by ``order`` (the first at the bottom); the y
    scale is the tallest column. Every ``tick_every``-th label is printed on the axis."""
    top, bottom, left = 10.0, 22.0, 4.0
    plot_h = height - top - bottom
    n = max(len(labels), 1)
    slot = (width - left) / n
    totals = [sum(counts.get(lab, Counter()).values()) for lab in labels]
    peak = max(totals, default=0) or 1
    bars: list[Bar] = []
    ticks: list[Tick] = []
    for i, lab in enumerate(labels):
        x = left + i * slot
        y = top + plot_h
        for outcome in order:
            c = counts.get(lab, Counter()).get(outcome, 0)
            if not c:
                continue
            h = plot_h * c / peak
            y -= h
            bars.append(
                Bar(
                    round(x + 0.5, 2),
                    round(y, 2),
                    round(max(slot - 1, 1), 2),
                    round(h, 2),
                    f"o-{outcome}",
                    f"{lab} UTC: {c} {outcome}",
                )
            )
        if i % tick_every == 0:
            ticks.append(Tick(round(x, 2), height - 6, lab))
    return StackedChart(width, height, bars, ticks, max(totals, default=0), top + plot_h)


@dataclass(frozen=True)
class HBar:
    """A horizontal bar: its label, the value shown and the bar's width in percent."""

    label: str
    value: str
    percent: float


def horizontal_bars(pairs: Sequence[tuple[str, int | float]]) -> list[HBar]:
    """Bars scaled to the largest value (100 %)."""
    peak = max((v for _, v in pairs), default=0) or 1
    return [HBar(name, f"{v:g}", round(100 * v / peak, 1)) for name, v in pairs]


@dataclass(frozen=True)
class Spark:
    """A sparkline: columns over ``width`` × ``height`` and the peak they scale to."""

    width: int
    height: int
    bars: list[Bar]
    peak: str
    total: str


def spark_columns(
    values: Sequence[Decimal], labels: Sequence[str], *, width: int = 240, height: int = 36
) -> Spark:
    """One thin column per value (an hour of burn), scaled to the largest."""
    peak = max(values, default=Decimal(0))
    n = max(len(values), 1)
    slot = width / n
    bars = []
    for i, v in enumerate(values):
        if v <= 0 or peak <= 0:
            continue
        h = float(Decimal(height - 2) * v / peak)
        bars.append(
            Bar(
                round(i * slot, 2),
                round(height - h, 2),
                round(max(slot - 1, 1), 2),
                round(h, 2),
                "burn",
                f"{labels[i]} UTC: {v.normalize():f}",
            )
        )
    total = sum(values, Decimal(0))
    return Spark(width, height, bars, f"{peak.normalize():f}", f"{total.normalize():f}")


#: Approval latency buckets: (upper bound in seconds, label); the last is open-ended.
LATENCY_BUCKETS: tuple[tuple[float, str], ...] = (
    (10, "under 10 s"),
    (60, "10 s – 1 min"),
    (300, "1 – 5 min"),
    (900, "5 – 15 min"),
    (3600, "15 min – 1 h"),
    (float("inf"), "1 h or more"),
)


def latency_histogram(seconds: Sequence[float]) -> list[HBar]:
    """Counts of approval latencies per :data:`LATENCY_BUCKETS` bucket, as bars."""
    counts = [0] * len(LATENCY_BUCKETS)
    for s in seconds:
        for i, (bound, _) in enumerate(LATENCY_BUCKETS):
            if s < bound:
                counts[i] += 1
                break
    return horizontal_bars(
        [(label, n) for (_, label), n in zip(LATENCY_BUCKETS, counts, strict=True)]
    )


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def duration(seconds: float | None) -> str:
    """``42 s``, ``3.5 min``, ``1.2 h`` (empty for None)."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
