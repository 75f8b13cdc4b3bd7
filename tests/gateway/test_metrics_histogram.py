"""`EventHistogram` exposes exactly what prometheus_client's `Histogram` would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from gateway.metrics import ITL_BUCKETS_SECONDS, EventHistogram


def _samples(registry: CollectorRegistry) -> list[str]:
    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line and "_created" not in line
    ]


@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), max_size=50))
def test_same_exposition_as_prometheus_client(values: list[float]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = EventHistogram("gap_seconds", "Gap.", ITL_BUCKETS_SECONDS, ours)
    reference = Histogram("gap_seconds", "Gap.", buckets=ITL_BUCKETS_SECONDS, registry=theirs)
    for value in [*values, *ITL_BUCKETS_SECONDS]:  # the bounds themselves too (le is <=)
        fast.observe(value)
        reference.observe(value)
    assert _samples(ours) == _samples(theirs)
