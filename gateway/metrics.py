"""The gateway's Prometheus metrics, built on an injected `CollectorRegistry`.

Labels are bounded: `replica` is a configured replica name or index (never a
URL), `route` is a route template, `status_class` is `2xx`…`5xx`,
`tenant` a configured tenant name (never a key), `kind`/`reason`/`segment` come
from fixed sets in the code or the configuration.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector
from prometheus_client.values import MutexValue

T = TypeVar("T")
TTFT_BUCKETS_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
ITL_BUCKETS_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5)
E2E_BUCKETS_SECONDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
QUEUE_BUCKETS_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class EventHistogram(Collector):
    """A histogram without locks, observed only from the gateway's event-loop thread.

    prometheus_client's `Histogram.observe` takes a lock for the bucket and one for
    the sum on every call; the inter-token gap is observed for every event of every
    stream and the other histograms for every request (a measurable share of the
    gateway's CPU at 32 streams, docs/gateway.md "Overhead").  Exposition is the
    same but for the `_created` series: cumulative `_bucket{le=…}`, `_count`, `_sum`.
    """

    def __init__(
        self, name: str, documentation: str, buckets: tuple[float, ...], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = [float(b) for b in buckets]
        self._counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation)
        cumulative, buckets = 0, []
        for bound, count in zip([*self._bounds, math.inf], list(self._counts), strict=True):
            cumulative += count
            buckets.append(("+Inf" if math.isinf(bound) else repr(bound), float(cumulative)))
        family.add_metric([], buckets, self._sum)
        yield family


def _memoised(metric: Any, labelvalues: tuple[Any, ...], make: Callable[..., T]) -> T:
    """The child `make(*labelvalues)` made the first time, kept on `metric` after."""
    memo: dict[tuple[Any, ...], T] | None = metric.__dict__.get("_memo")
    if memo is None:
        memo = metric.__dict__["_memo"] = {}
    child = memo.get(labelvalues)
    if child is None:
        child = memo[labelvalues] = make(*labelvalues)
    return child


class LoopValue:
    """prometheus_client's `MutexValue` without the mutex, for values written only
    from the gateway's event-loop thread (a scrape from another thread reads a whole
    float either way).  `inc` and `set` are then an attribute update instead of a
    lock round trip, several times per request."""

    __slots__ = ("_exemplar", "_value")

    def __init__(self) -> None:
        self._value = 0.0
        self._exemplar: Any = None

    def inc(self, amount: float) -> None:
        self._value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        self._value = value

    def set_exemplar(self, exemplar: Any) -> None:
        self._exemplar = exemplar

    def get(self) -> float:
        return self._value

    def get_exemplar(self) -> Any:
        return self._exemplar


def _loop_value(metric: Any) -> None:
    """Swap the value of an observable metric for a `LoopValue`, except in
    prometheus_client's multiprocess mode, whose values live in shared files."""
    if isinstance(metric._value, MutexValue):
        metric._value = LoopValue()


class _LoopMetric(MetricWrapperBase):
    """What `MemoCounter` and `MemoGauge` share: each labelled child kept after its
    first `.labels(...)` (the library validates the values and takes a lock on every
    call, and the gateway makes several per request; label values are bounded, module
    docstring, so the memo is too) and a `LoopValue` (they are only updated on the
    event loop)."""

    def _metric_init(self) -> None:
        super()._metric_init()  # type: ignore[no-untyped-call]  # Counter's or Gauge's, typed
        _loop_value(self)

    def labels(self, *labelvalues: Any, **labelkwargs: Any) -> Self:
        if labelkwargs:
            return super().labels(*labelvalues, **labelkwargs)
        return _memoised(self, labelvalues, super().labels)

    def _direct_value(self) -> LoopValue | None:
        """The value to update directly; None where the library must check the call
        (a labelled parent, which has no value, or multiprocess mode)."""
        value = self.__dict__.get("_value")
        return value if isinstance(value, LoopValue) else None


class MemoCounter(_LoopMetric, Counter):
    """prometheus_client's `Counter` as `_LoopMetric`; misuse (a labelled parent, a
    negative amount) still raises the library's errors."""

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        value = self._direct_value()
        if value is None or amount < 0 or exemplar is not None:
            super().inc(amount, exemplar)
        else:
            value.inc(amount)


class MemoGauge(_LoopMetric, Gauge):
    """prometheus_client's `Gauge` as `_LoopMetric`."""

    def inc(self, amount: float = 1) -> None:
        value = self._direct_value()
        if value is None or self._is_most_recent:
            super().inc(amount)
        else:
            value.inc(amount)

    def dec(self, amount: float = 1) -> None:
        value = self._direct_value()
        if value is None or self._is_most_recent:
            super().dec(amount)
        else:
            value.inc(-amount)


@dataclass(frozen=True)
class GatewayMetrics:
    requests: Counter
    in_flight: Gauge
    concurrency_limit: Gauge
    queue_wait: EventHistogram
    ttft: EventHistogram
    inter_token_latency: EventHistogram
    e2e_latency: EventHistogram
    prompt_tokens: Counter
    completion_tokens: Counter
    cached_prompt_tokens: Counter
    upstream_errors: Counter
    rejected: Counter
    layout_rewrites: Counter
    prefix_divergence: Counter
    upstream_in_flight: Gauge
    upstream_requests: Counter
    upstream_healthy: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> GatewayMetrics:
        def counter(name: str, doc: str, *labels: str) -> Counter:
            return MemoCounter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> EventHistogram:
            return EventHistogram(name, doc, buckets, registry)

        return cls(
            requests=counter(
                "gateway_requests_total",
                "Responses by route and status class.",
                "route",
                "status_class",
            ),
            in_flight=MemoGauge(
                "gateway_in_flight", "Requests holding an admission slot.", registry=registry
            ),
            concurrency_limit=Gauge(
                "gateway_concurrency_limit",
                "Current global concurrency limit (lowered by the thermal guard).",
                registry=registry,
            ),
            queue_wait=histogram(
                "gateway_queue_wait_seconds", "Wait for an admission slot.", QUEUE_BUCKETS_SECONDS
            ),
            ttft=histogram(
                "gateway_ttft_seconds",
                "Request start to first streamed event.",
                TTFT_BUCKETS_SECONDS,
            ),
            inter_token_latency=histogram(
                "gateway_inter_token_latency_seconds",
                "Gap between streamed events.",
                ITL_BUCKETS_SECONDS,
            ),
            e2e_latency=histogram(
                "gateway_e2e_latency_seconds",
                "Request start to last byte of a generation.",
                E2E_BUCKETS_SECONDS,
            ),
            prompt_tokens=counter(
                "gateway_prompt_tokens_total", "Prompt tokens (vLLM usage).", "tenant"
            ),
            completion_tokens=counter(
                "gateway_completion_tokens_total", "Completion tokens (vLLM usage).", "tenant"
            ),
            cached_prompt_tokens=counter(
                "gateway_cached_prompt_tokens_total",
                "Prompt tokens served from vLLM's prefix cache "
                "(usage.prompt_tokens_details.cached_tokens).",
                "tenant",
            ),
            upstream_errors=counter(
                "gateway_upstream_errors_total", "Failures talking to vLLM.", "kind"
            ),
            rejected=counter(
                "gateway_rejected_total", "Requests refused by the gateway itself.", "reason"
            ),
            layout_rewrites=counter(
                "gateway_layout_rewrites_total",
                "Prefix-stable layout changes (values moved per kind, tool rewrites).",
                "kind",
            ),
            prefix_divergence=counter(
                "gateway_prefix_divergence_total",
                "Consecutive requests of a session whose prefix broke, by first segment.",
                "segment",
            ),
            upstream_in_flight=MemoGauge(
                "gateway_upstream_in_flight",
                "Requests sent to a vLLM replica and not finished.",
                ["replica"],
                registry=registry,
            ),
            upstream_requests=counter(
                "gateway_upstream_requests_total",
                "Attempts per replica by outcome (ok, connect, timeout, protocol, cancelled).",
                "replica",
                "outcome",
            ),
            upstream_healthy=MemoGauge(
                "gateway_upstream_healthy",
                "1 while a replica is healthy (last /health or connection), else 0.",
                ["replica"],
                registry=registry,
            ),
        )


def status_class(status_code: int) -> str:
    return f"{status_code // 100}xx"
