"""`EventHistogram` and `LoopMetric` expose exactly what prometheus_client's
`Histogram`, `Counter` and `Gauge` would."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.core.metrics import ITL_BUCKETS_SECONDS, EventHistogram, LoopMetric


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
    memo = LoopMetric("counter", "requests", "Requests.", ("route", "status_class"), ours)
    reference = Counter("requests", "Requests.", ["route", "status_class"], registry=theirs)
    gauge = LoopMetric("gauge", "in_flight", "In flight.", ("replica",), ours)
    reference_gauge = Gauge("in_flight", "In flight.", ["replica"], registry=theirs)
    for route, status in calls:
        memo.labels(route, status).inc()
        reference.labels(route, status).inc()
        gauge.labels(route).inc()
        reference_gauge.labels(route).inc()
        if status == "5xx":
            gauge.labels(route).dec()
            reference_gauge.labels(route).dec()
    memo.labels("a", "2xx").inc(3)
    reference.labels("a", "2xx").inc(3)
    assert _samples(ours) == _samples(theirs)
    assert memo.labels("a", "2xx") is memo.labels("a", "2xx")


@given(st.lists(st.tuples(st.sampled_from(["inc", "dec", "set"]), st.integers(0, 5)), max_size=30))
def test_unlabelled_loop_values_expose_what_prometheus_client_does(
    calls: list[tuple[str, int]],
) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    gauge = LoopMetric("gauge", "in_flight", "In flight.", registry=ours)
    reference_gauge = Gauge("in_flight", "In flight.", registry=theirs)
    counter = LoopMetric("counter", "tokens", "Tokens.", registry=ours)
    reference = Counter("tokens", "Tokens.", registry=theirs)
    for op, amount in calls:
        getattr(gauge, op)(amount)
        getattr(reference_gauge, op)(amount)
        counter.inc(amount)
        reference.inc(amount)
    assert _samples(ours) == _samples(theirs)


def _error(call: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as caught:
        call()
    return str(caught.value)


def test_misuse_is_refused_and_changes_nothing() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = LoopMetric("counter", "c", "C.", ("route",), ours)
    gauge = LoopMetric("gauge", "g", "G.", ("replica",), ours)
    Counter("c", "C.", ["route"], registry=theirs)
    Gauge("g", "G.", ["replica"], registry=theirs)
    # A labelled parent has no value; counters never go down; label counts must match.
    for call in (counter.inc, gauge.inc, gauge.dec, lambda: counter.labels("a", "b")):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("a").inc(-1)
    with pytest.raises(ValueError, match="never decremented"):
        counter.labels("a").dec()
    assert [line for line in _samples(ours) if "{" in line] == ['c_total{route="a"} 0.0']
    assert _samples(theirs) == [line for line in _samples(ours) if "{" not in line]
