"""The gateway's Prometheus metrics, built on an injected `CollectorRegistry`.

Labels are bounded: `replica` is a configured replica name or index (never a
URL), `route` is a route template, `status_class` is `2xx`…`5xx`,
`tenant` a configured tenant name (never a key), `kind`/`reason`/`segment` come
from fixed sets in the code or the configuration.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

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

    def observe_zeros(self, n: int) -> None:
        """`n` observations of 0 (events that arrived in one read: no gap between them)."""
        self._counts[bisect_left(self._bounds, 0.0)] += n

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


class LoopChild:
    """One series of a `LoopMetric`: a float updated in place (no lock: written only
    from the event loop; a scrape from another thread reads a whole float either way)."""

    __slots__ = ("_counter", "value")

    def __init__(self, counter: bool) -> None:
        self._counter = counter
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        if self._counter and amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        if self._counter:
            raise ValueError("Counters can only be incremented, never decremented.")
        self.value -= amount

    def set(self, value: float) -> None:
        if self._counter:
            raise ValueError("Counters can only be incremented, never set.")
        self.value = float(value)


class LoopMetric(Collector):
    """A counter or gauge family updated from the gateway's event loop only, a custom
    `Collector` (prometheus_client's public API) over plain floats: `labels(...)` is a
    dict lookup and `inc` an addition, where the library's `Counter` validates the
    label values and takes a lock on every call, several times per request.  Exposition
    is the library's but for the `_created` series."""

    def __init__(
        self,
        kind: str,
        name: str,
        documentation: str,
        labelnames: tuple[str, ...] = (),
        registry: CollectorRegistry | None = None,
    ) -> None:
        if kind not in ("counter", "gauge"):
            raise ValueError(f"kind={kind!r}; must be counter or gauge")
        self.kind = kind
        self.name = name.removesuffix("_total") if kind == "counter" else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[Any, ...], tuple[tuple[str, ...], LoopChild]] = {}
        if not self.labelnames:
            self._children[()] = ((), LoopChild(kind == "counter"))
        if registry is not None:
            registry.register(self)

    def labels(self, *labelvalues: Any) -> LoopChild:
        found = self._children.get(labelvalues)
        if found is None:
            if len(labelvalues) != len(self.labelnames) or not self.labelnames:
                raise ValueError(
                    f"{self.name}: {len(labelvalues)} label values given for "
                    f"labels {list(self.labelnames)}"
                )
            found = (tuple(str(v) for v in labelvalues), LoopChild(self.kind == "counter"))
            self._children[labelvalues] = found
        return found[1]

    def _unlabelled(self) -> LoopChild:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}: use .labels(...)")
        return self._children[()][1]

    def inc(self, amount: float = 1) -> None:
        self._unlabelled().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._unlabelled().dec(amount)

    def set(self, value: float) -> None:
        self._unlabelled().set(value)

    def _family(self) -> CounterMetricFamily | GaugeMetricFamily:
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> list[CounterMetricFamily | GaugeMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = self._family()
        for labels, child in list(self._children.values()):
            family.add_metric(list(labels), child.value)
        yield family


class SettableGauge(Protocol):
    """What the thermal guard and the memory gate set: a gauge, or one model's share of
    one (the standalone gateway's several models, gateway/standalone/models.py)."""

    def set(self, value: float) -> None: ...


@dataclass(frozen=True)
class GatewayMetrics:
    requests: LoopMetric
    in_flight: LoopMetric
    concurrency_limit: SettableGauge
    memory_low: SettableGauge
    queue_wait: EventHistogram
    ttft: EventHistogram
    inter_token_latency: EventHistogram
    e2e_latency: EventHistogram
    prompt_tokens: LoopMetric
    completion_tokens: LoopMetric
    cached_prompt_tokens: LoopMetric
    upstream_errors: LoopMetric
    rejected: LoopMetric
    layout_rewrites: LoopMetric
    prefix_divergence: LoopMetric
    upstream_in_flight: LoopMetric
    upstream_requests: LoopMetric
    upstream_healthy: LoopMetric

    @classmethod
    def create(cls, registry: CollectorRegistry) -> GatewayMetrics:
        def counter(name: str, doc: str, *labels: str) -> LoopMetric:
            return LoopMetric("counter", name, doc, labels, registry)

        def gauge(name: str, doc: str, *labels: str) -> LoopMetric:
            return LoopMetric("gauge", name, doc, labels, registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> EventHistogram:
            return EventHistogram(name, doc, buckets, registry)

        return cls(
            requests=counter(
                "gateway_requests_total",
                "Responses by route and status class.",
                "route",
                "status_class",
            ),
            in_flight=gauge("gateway_in_flight", "Requests holding an admission slot."),
            concurrency_limit=Gauge(
                "gateway_concurrency_limit",
                "Current global concurrency limit (lowered by the thermal guard).",
                registry=registry,
            ),
            memory_low=Gauge(
                "gateway_memory_low",
                "1 while the entrypoint's memory watchdog refuses work (503 to new requests).",
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
                "Consecutive requests of a chat session whose prefix broke, by first segment.",
                "segment",
            ),
            upstream_in_flight=gauge(
                "gateway_upstream_in_flight",
                "Requests sent to a vLLM replica and not finished.",
                "replica",
            ),
            upstream_requests=counter(
                "gateway_upstream_requests_total",
                "Attempts per replica by outcome (ok, connect, timeout, protocol, cancelled).",
                "replica",
                "outcome",
            ),
            upstream_healthy=gauge(
                "gateway_upstream_healthy",
                "1 while a replica is healthy (last /health or connection), else 0.",
                "replica",
            ),
        )


def status_class(status_code: int) -> str:
    return f"{status_code // 100}xx"
