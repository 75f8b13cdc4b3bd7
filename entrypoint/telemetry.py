"""Host telemetry collectors: host memory (psutil) and GPUs (NVML), read at scrape time.

Without NVML or without a device the GPU series are absent (never zero). On GB10
NVML answers memory queries with Not Supported: the GPU memory series then come
from /proc/meminfo (MemTotal, MemAvailable), since the GPU uses system memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from entrypoint.hardware import HostMemory
from entrypoint.nvml import GpuReading


class HostMemoryCollector(Collector):
    """sparkserve_host_memory_bytes: total and available as the memory watchdog reads
    them (entrypoint/memory.py: /proc/meminfo, bounded by a limited container's memory
    cgroup), MemFree, and the watchdog's floor (0 = off)."""

    def __init__(self, read_host: Callable[[], HostMemory], floor_bytes: int = 0) -> None:
        self._read_host = read_host
        self._floor_bytes = floor_bytes

    def collect(self) -> Iterable[Metric]:
        host = self._read_host()
        family = GaugeMetricFamily(
            "sparkserve_host_memory_bytes",
            "Memory as the watchdog reads it: total and available (MemTotal, MemAvailable; "
            "a limited container's cgroup where smaller), free (MemFree), floor (0 = off).",
            labels=["kind"],
        )
        family.add_metric(["total"], host.total_bytes)
        family.add_metric(["available"], host.available_bytes)
        family.add_metric(["free"], host.free_bytes)
        family.add_metric(["floor"], self._floor_bytes)
        yield family


def gpu_memory(gpu: GpuReading, host: Callable[[], HostMemory]) -> dict[str, int]:
    """total/used/free of one GPU; from host memory where NVML says Not Supported (UMA)."""
    if gpu.memory_bytes is not None:
        return gpu.memory_bytes
    mem = host()
    return {
        "total": mem.total_bytes,
        "used": mem.total_bytes - mem.available_bytes,
        "free": mem.available_bytes,
    }


class GpuCollector(Collector):
    """sparkserve_gpu_* per GPU (label `gpu` = NVML index), only for readings NVML gives."""

    def __init__(
        self, read_gpus: Callable[[], list[GpuReading]], read_host: Callable[[], HostMemory]
    ) -> None:
        self._read_gpus = read_gpus
        self._read_host = read_host

    def collect(self) -> Iterable[Metric]:
        gpus = self._read_gpus()
        if not gpus:
            return
        yield from self._scalars(gpus)
        clocks = GaugeMetricFamily(
            "sparkserve_gpu_clock_hertz", "GPU clocks (NVML).", labels=["gpu", "clock"]
        )
        memory = GaugeMetricFamily(
            "sparkserve_gpu_memory_bytes",
            "GPU memory (NVML; /proc/meminfo on unified memory).",
            labels=["gpu", "kind"],
        )
        info = GaugeMetricFamily("sparkserve_gpu_info", "GPU name (NVML).", labels=["gpu", "name"])
        for gpu in gpus:
            for clock, hertz in gpu.clocks_hertz.items():
                clocks.add_metric([str(gpu.index), clock], hertz)
            for kind, value in gpu_memory(gpu, self._read_host).items():
                memory.add_metric([str(gpu.index), kind], value)
            info.add_metric([str(gpu.index), gpu.name], 1)
        yield from (clocks, memory, info)

    def _scalars(self, gpus: list[GpuReading]) -> Iterable[Metric]:
        specs: tuple[tuple[str, str, Callable[[GpuReading], float | None]], ...] = (
            (
                "sparkserve_gpu_temperature_celsius",
                "GPU core temperature (NVML).",
                lambda g: g.temperature_celsius,
            ),
            ("sparkserve_gpu_power_watts", "GPU power draw (NVML).", lambda g: g.power_watts),
            (
                "sparkserve_gpu_utilization_ratio",
                "GPU busy fraction over NVML's sample period (0-1).",
                lambda g: g.utilization_ratio,
            ),
        )
        for name, doc, read in specs:
            family = GaugeMetricFamily(name, doc, labels=["gpu"])
            for gpu in gpus:
                value = read(gpu)
                if value is not None:
                    family.add_metric([str(gpu.index)], value)
            yield family
