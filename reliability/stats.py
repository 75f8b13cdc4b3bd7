"""Small statistics over measured values: percentiles and their one-line summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1024**2


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default; nan when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"q={q}; must be within 0..100")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Spread:
    p50: float
    p95: float
    p99: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(
            percentile(values, 50), percentile(values, 95), percentile(values, 99), len(values)
        )

    def ms(self) -> str:
        """`p50/p95/p99 a/b/c ms` (or `none` without samples)."""
        if not self.count:
            return "none"
        return f"{self.p50 * 1e3:.0f}/{self.p95 * 1e3:.0f}/{self.p99 * 1e3:.0f} ms"


def mib(value_bytes: float) -> str:
    return f"{value_bytes / MIB:+.1f} MiB"
