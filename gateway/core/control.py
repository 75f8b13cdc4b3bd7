"""What the entrypoint's control `/metrics` (GATEWAY_CONTROL_URL) drives: one read
every GATEWAY_THERMAL_POLL_SECONDS (the poll: gateway/edge/control_poll.py) feeds the
thermal guard (gateway/core/thermal.py) and the memory gate.

The memory gate follows `sparkserve_memory_low`: 1 while the entrypoint's memory
watchdog refuses work because available memory is under its floor
(docs/entrypoint.md, "Memory watchdog"). New requests and those queued are then
answered 503 with Retry-After; streams in flight go on until vLLM ends. An
unreachable control endpoint, or one without the gauge, leaves both as they are.
"""

from __future__ import annotations

import logging
import math

from prometheus_client.parser import text_string_to_metric_families

from gateway.core.admission import Admission
from gateway.core.metrics import GatewayMetrics
from gateway.core.thermal import ThermalGuard, hottest_gpu_celsius

MEMORY_LOW_METRIC = "sparkserve_memory_low"
log = logging.getLogger("gateway.control")


def memory_low(metrics_text: str) -> bool | None:
    """Whether the entrypoint refuses work for lack of memory; None when not said."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == MEMORY_LOW_METRIC and not math.isnan(sample.value):
                return sample.value >= 1
    return None


class MemoryGate:
    """Closes and reopens admission as the control endpoint says."""

    def __init__(self, admission: Admission, metrics: GatewayMetrics) -> None:
        self._admission = admission
        self._metrics = metrics

    def apply(self, low: bool | None) -> None:
        if low is None:
            return
        if low != self._admission.memory_low:
            log.warning(
                "the entrypoint reports memory %s: %s",
                "under its floor" if low else "back above its floor",
                "new requests get 503" if low else "admitting again",
            )
        self._admission.set_memory_low(low)
        self._metrics.memory_low.set(float(low))


class ControlPoll:
    def __init__(self, thermal: ThermalGuard, memory: MemoryGate) -> None:
        self.thermal = thermal
        self.memory = memory

    def apply(self, metrics_text: str) -> None:
        self.thermal.apply(hottest_gpu_celsius(metrics_text))
        self.memory.apply(memory_low(metrics_text))
