"""`EventHistogram`, `MemoCounter` and `MemoGauge` expose exactly what
prometheus_client's `Histogram`, `Counter` and `Gauge` would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.metrics import ITL_BUCKETS_SECONDS, EventHistogram, MemoCounter, MemoGauge


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


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["2xx", "5xx"])), max_size=40
    )
)
def test_memoised_labels_expose_what_prometheus_client_does(calls: list[tuple[str, str]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    memo = MemoCounter("requests", "Requests.", ["route", "status_class"], registry=ours)
    reference = Counter("requests", "Requests.", ["route", "status_class"], registry=theirs)
    gauge = MemoGauge("in_flight", "In flight.", ["replica"], registry=ours)
    reference_gauge = Gauge("in_flight", "In flight.", ["replica"], registry=theirs)
    for route, status in calls:
        memo.labels(route, status).inc()
        reference.labels(route, status).inc()
        gauge.labels(route).inc()
        reference_gauge.labels(route).inc()
        if status == "5xx":
            gauge.labels(route).dec()
            reference_gauge.labels(route).dec()
    memo.labels(route="a", status_class="2xx").inc(3)  # keyword form: not memoised, same child
    reference.labels(route="a", status_class="2xx").inc(3)
    assert _samples(ours) == _samples(theirs)
    assert memo.labels("a", "2xx") is memo.labels("a", "2xx")
