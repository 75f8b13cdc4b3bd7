"""Pure statistics over latencies: percentiles, distributions, gaps, windows."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

PERCENTILES = (50.0, 95.0, 99.0)


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= pct <= 100.0:
        raise ValueError(f"pct={pct}; must be within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Dist:
    """Summary of a sample (seconds unless the caller says otherwise)."""

    n: int
    mean: float
    p50: float
    p95: float
    p99: float
    min: float
    max: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scaled(self, factor: float) -> Dist:
        return Dist(
            self.n,
            *(v * factor for v in (self.mean, self.p50, self.p95, self.p99, self.min, self.max)),
        )


def dist(values: Iterable[float]) -> Dist | None:
    """The distribution of `values`, or None when there are none."""
    sample = list(values)
    if not sample:
        return None
    return Dist(
        n=len(sample),
        mean=sum(sample) / len(sample),
        p50=percentile(sample, 50.0),
        p95=percentile(sample, 95.0),
        p99=percentile(sample, 99.0),
        min=min(sample),
        max=max(sample),
    )


def dist_dict(values: Iterable[float]) -> dict[str, Any] | None:
    summary = dist(values)
    return None if summary is None else summary.to_dict()


def gaps(times: Sequence[float]) -> list[float]:
    """Differences between consecutive arrival times."""
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def gaps_in_window(times: Sequence[float], start: float, end: float) -> list[float]:
    """Gaps whose interval overlaps [start, end]: a stall that spans the window counts."""
    return [
        later - earlier
        for earlier, later in itertools.pairwise(times)
        if later > start and earlier < end
    ]


def rate(amount: float, seconds: float) -> float | None:
    """amount / seconds, or None for an empty interval."""
    return amount / seconds if seconds > 0 else None


def ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None
