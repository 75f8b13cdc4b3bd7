"""`EventHistogram`, `MemoCounter` and `MemoGauge` expose exactly what
prometheus_client's `Histogram`, `Counter` and `Gauge` would."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.metrics import (
    ITL_BUCKETS_SECONDS,
    EventHistogram,
    LoopValue,
    MemoCounter,
    MemoGauge,
)


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


@given(st.lists(st.tuples(st.sampled_from(["inc", "dec", "set"]), st.integers(0, 5)), max_size=30))
def test_unlabelled_loop_values_expose_what_prometheus_client_does(
    calls: list[tuple[str, int]],
) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    gauge = MemoGauge("in_flight", "In flight.", registry=ours)
    reference_gauge = Gauge("in_flight", "In flight.", registry=theirs)
    counter = MemoCounter("tokens", "Tokens.", registry=ours)
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


def test_misuse_raises_what_prometheus_client_raises() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = MemoCounter("c", "C.", ["route"], registry=ours)
    gauge = MemoGauge("g", "G.", ["replica"], registry=ours)
    reference = Counter("c", "C.", ["route"], registry=theirs)
    reference_gauge = Gauge("g", "G.", ["replica"], registry=theirs)
    # A labelled parent is not observable; counters never go down.
    assert _error(counter.inc) == _error(reference.inc)
    assert _error(gauge.inc) == _error(reference_gauge.inc)
    assert _error(gauge.dec) == _error(reference_gauge.dec)
    assert _error(lambda: counter.labels("a").inc(-1)) == _error(
        lambda: reference.labels("a").inc(-1)
    )
    assert _samples(ours) == _samples(theirs)


def test_children_and_unlabelled_metrics_update_a_loop_value() -> None:
    registry = CollectorRegistry()
    children = [
        MemoCounter("c", "C.", ["route"], registry=registry).labels("a"),
        MemoGauge("g", "G.", ["replica"], registry=registry).labels("0"),
        MemoGauge("u", "U.", registry=registry),
    ]
    assert all(isinstance(child._value, LoopValue) for child in children)
