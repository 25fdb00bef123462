"""Summaries of timing samples: mean, median and percentiles (linear interpolation on sorted
data). Used by the chaos report and by the benchmarks (bench/ sits above testing/)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation, like numpy's default."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """{mean, median, p90, p99, min, max} of ``values * scale`` (NaN when empty)."""
    if not values:
        return {k: math.nan for k in ("mean", "median", "p90", "p99", "min", "max")}
    xs = [v * scale for v in values]
    return {
        "mean": statistics.fmean(xs),
        "median": statistics.median(xs),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "min": min(xs),
        "max": max(xs),
    }
