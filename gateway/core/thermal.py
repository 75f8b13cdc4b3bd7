"""Thermal guard: lower the concurrency limit while the GPU runs hot (the runtime article).

Polls the entrypoint's control `/metrics` (host telemetry) for the gauge
`sparkserve_gpu_temperature_celsius`; above the threshold the global limit
becomes `max_concurrency × fraction`, at or below it the full limit returns.
An unreachable control endpoint leaves the limit as it is (the poll:
gateway/edge/control_poll.py).
"""

from __future__ import annotations

import logging
import math

from prometheus_client.parser import text_string_to_metric_families

from gateway.core.admission import Admission
from gateway.core.metrics import GatewayMetrics

TEMPERATURE_METRIC = "sparkserve_gpu_temperature_celsius"
log = logging.getLogger("gateway.thermal")


def hottest_gpu_celsius(metrics_text: str) -> float | None:
    """The highest `sparkserve_gpu_temperature_celsius` sample, or None when absent."""
    readings = [
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        if family.name == TEMPERATURE_METRIC
        for sample in family.samples
        if sample.name == TEMPERATURE_METRIC and not math.isnan(sample.value)
    ]
    return max(readings) if readings else None


def throttled_limit(max_concurrency: int, fraction: float) -> int:
    return max(1, math.floor(max_concurrency * fraction))


class ThermalGuard:
    """Applies the limit that the latest temperature reading calls for."""

    def __init__(
        self,
        admission: Admission,
        metrics: GatewayMetrics,
        *,
        max_concurrency: int,
        threshold_celsius: float,
        fraction: float,
    ) -> None:
        self._admission = admission
        self._metrics = metrics
        self._full = max_concurrency
        self._hot = throttled_limit(max_concurrency, fraction)
        self._threshold = threshold_celsius
        self.hot = False

    def apply(self, celsius: float | None) -> None:
        if celsius is None:
            return
        hot = celsius > self._threshold
        if hot != self.hot:
            log.warning(
                "GPU at %.1f °C: concurrency limit %d", celsius, self._hot if hot else self._full
            )
        self.hot = hot
        limit = self._hot if hot else self._full
        self._admission.set_limit(limit)
        self._metrics.concurrency_limit.set(limit)
