"""Latency summaries shared by the benchmarks that time whole calls in milliseconds."""

from __future__ import annotations

import statistics


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    """``{median_ms, p99_ms, mean_ms, n}`` of ``samples`` given in seconds."""
    return {
        "median_ms": statistics.median(samples) * 1000,
        "p99_ms": quantile(samples, 0.99) * 1000,
        "mean_ms": statistics.fmean(samples) * 1000,
        "n": len(samples),
    }
