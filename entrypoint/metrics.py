"""The entrypoint's own metrics: the plan, what vLLM observed, and the lifecycle.

Every collector reads its source at scrape time; `build_registry` puts them, and
the host telemetry collectors, into a fresh CollectorRegistry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from budget.plan import Plan
from entrypoint.calibration import planned_weights_bytes
from entrypoint.capacity import capacity_terms
from entrypoint.hardware import HostMemory
from entrypoint.logscan import LogWatcher, Observed
from entrypoint.nvml import GpuReading
from entrypoint.state import Lifecycle
from entrypoint.telemetry import GpuCollector, HostMemoryCollector


def _by_source(name: str, doc: str, planned: float, observed: float | None) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=["source"])
    family.add_metric(["planned"], planned)
    if observed is not None:
        family.add_metric(["observed"], observed)
    return family


class BudgetCollector(Collector):
    """sparkserve_budget_*: planned values, and vLLM's logged ones once they appear."""

    def __init__(self, plan: Plan, observed: Callable[[], Observed]) -> None:
        self._plan = plan
        self._observed = observed

    def collect(self) -> Iterable[Metric]:
        plan, seen = self._plan, self._observed()
        yield _by_source(
            "sparkserve_budget_kv_tokens",
            "KV cache capacity in tokens.",
            plan.kv_cache_tokens,
            seen.kv_cache_tokens,
        )
        yield _by_source(
            "sparkserve_budget_max_concurrency",
            "Requests of max_model_len the KV pool holds.",
            plan.max_concurrency,
            seen.max_concurrency,
        )
        calibrated = GaugeMetricFamily(
            "sparkserve_budget_calibration_bytes",
            "Planned vs logged sizes.",
            labels=["quantity", "source"],
        )
        pairs = (
            ("kv_cache", plan.kv_cache_bytes, seen.kv_cache_bytes),
            ("weights", planned_weights_bytes(plan), seen.weights_bytes),
            ("cudagraphs", plan.components.get("cudagraph_pool"), seen.cudagraph_bytes),
        )
        for quantity, planned, observed in pairs:
            for source, value in (("planned", planned), ("observed", observed)):
                if value is not None:
                    calibrated.add_metric([quantity, source], value)
        yield calibrated
        yield from self._capacity(seen)
        yield from self._plan_sizes()

    def _capacity(self, seen: Observed) -> Iterable[Metric]:
        terms = capacity_terms(self._plan, seen)
        if not terms:
            return
        family = GaugeMetricFamily(
            "sparkserve_budget_capacity_difference",
            "vLLM's KV term minus the plan's (block_size and blocks_per_request in blocks "
            "or tokens, padding_layers in layers, pool_bytes in bytes); 0 = as planned.",
            labels=["term"],
        )
        for term in terms:
            family.add_metric([term.name], term.observed - term.planned)
        yield family

    def _plan_sizes(self) -> Iterable[Metric]:
        plan = self._plan
        parts = GaugeMetricFamily(
            "sparkserve_budget_bytes", "Planned bytes per component.", labels=["component"]
        )
        for component, size in plan.components.items():
            parts.add_metric([component], size)
        yield parts
        yield GaugeMetricFamily(
            "sparkserve_budget_usable_bytes", "Memory the plan may use.", value=plan.usable_bytes
        )
        yield GaugeMetricFamily(
            "sparkserve_budget_headroom_bytes", "Usable minus planned.", value=plan.headroom_bytes
        )
        yield GaugeMetricFamily(
            "sparkserve_budget_fits", "1 when the plan fits.", value=float(plan.fits)
        )


class LifecycleCollector(Collector):
    def __init__(self, lifecycle: Lifecycle, info: dict[str, str]) -> None:
        self._lifecycle = lifecycle
        self._info = info

    def collect(self) -> Iterable[Metric]:
        status = self._lifecycle.status
        yield GaugeMetricFamily(
            "sparkserve_ready",
            "1 once warm-up is done and vLLM answers.",
            value=float(status.ready),
        )
        yield GaugeMetricFamily(
            "sparkserve_vllm_up", "1 while vLLM answers /health.", value=float(status.vllm_up)
        )
        yield GaugeMetricFamily(
            "sparkserve_start_time_seconds",
            "Unix time the entrypoint started (restarts: changes() of it).",
            value=status.started_at,
        )
        yield CounterMetricFamily(
            "sparkserve_health_failures",
            "Failed /health checks after ready.",
            value=status.health_failures,
        )
        yield GaugeMetricFamily(
            "sparkserve_memory_low",
            "1 while the memory watchdog refuses work (available memory under the floor).",
            value=float(status.memory_low is not None),
        )
        yield CounterMetricFamily(
            "sparkserve_memory_low_events",
            "Times available memory stayed under the floor long enough to refuse work.",
            value=status.memory_low_events,
        )
        if status.startup_seconds is not None:
            yield GaugeMetricFamily(
                "sparkserve_startup_seconds", "Launch to ready.", value=status.startup_seconds
            )
        yield from self._warmup(status.warmup_seconds, status.warmup_steps)
        info = GaugeMetricFamily("sparkserve_info", "What is served.", labels=list(self._info))
        info.add_metric(list(self._info.values()), 1)
        yield info

    def _warmup(
        self, total: float | None, steps: tuple[tuple[str, float], ...]
    ) -> Iterable[Metric]:
        if total is not None:
            yield GaugeMetricFamily("sparkserve_warmup_seconds", "Whole warm-up.", value=total)
        if steps:
            family = GaugeMetricFamily(
                "sparkserve_warmup_step_seconds", "Each warm-up step.", labels=["step"]
            )
            for name, seconds in steps:
                family.add_metric([name], seconds)
            yield family


def build_registry(
    plan: Plan,
    watcher: LogWatcher,
    lifecycle: Lifecycle,
    info: dict[str, str],
    read_gpus: Callable[[], list[GpuReading]],
    read_host: Callable[[], HostMemory],
    memory_floor_bytes: int = 0,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(BudgetCollector(plan, watcher.snapshot))
    registry.register(LifecycleCollector(lifecycle, info))
    registry.register(HostMemoryCollector(read_host, memory_floor_bytes))
    registry.register(GpuCollector(read_gpus, read_host))
    return registry
