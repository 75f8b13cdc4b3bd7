"""NVML (nvidia-ml-py's `pynvml`) read into plain values; absent or failing NVML → no GPUs.

Every call that a device may not support (GB10 answers memory queries with
NVML_ERROR_NOT_SUPPORTED) yields None for that reading instead of failing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")
MILLI = 1e-3
MHZ = 1e6
PERCENT = 100.0
# (label, pynvml constant name) of the clocks exported.
CLOCKS = (
    ("graphics", "NVML_CLOCK_GRAPHICS"),
    ("sm", "NVML_CLOCK_SM"),
    ("memory", "NVML_CLOCK_MEM"),
)


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment; None = the device does not report it."""

    index: int
    name: str
    temperature_celsius: float | None = None
    power_watts: float | None = None
    utilization_ratio: float | None = None
    clocks_hertz: dict[str, float] = field(default_factory=dict)
    memory_bytes: dict[str, int] | None = None  # total/used/free; None on GB10


def load_nvml() -> Any | None:
    """The initialised `pynvml` module, or None without the package, driver or a device."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
        if int(nvml.nvmlDeviceGetCount()) < 1:
            return None
    except nvml.NVMLError:
        return None
    return nvml


def _maybe(nvml: Any, call: Callable[[], T]) -> T | None:
    try:
        return call()
    except nvml.NVMLError:
        return None


def _name(nvml: Any, handle: Any) -> str:
    name = nvml.nvmlDeviceGetName(handle)
    return name.decode() if isinstance(name, bytes) else str(name)


def _memory(nvml: Any, handle: Any) -> dict[str, int] | None:
    info = _maybe(nvml, lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    if info is None:
        return None
    return {"total": int(info.total), "used": int(info.used), "free": int(info.free)}


def _clocks(nvml: Any, handle: Any) -> dict[str, float]:
    clocks: dict[str, float] = {}
    for label, constant in CLOCKS:
        mhz = _maybe(nvml, partial(nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, constant)))
        if mhz is not None:
            clocks[label] = float(mhz) * MHZ
    return clocks


def read_gpu(nvml: Any, index: int) -> GpuReading:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    temp = _maybe(nvml, lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    power_mw = _maybe(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    util = _maybe(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    return GpuReading(
        index=index,
        name=_name(nvml, handle),
        temperature_celsius=None if temp is None else float(temp),
        power_watts=None if power_mw is None else float(power_mw) * MILLI,
        utilization_ratio=None if util is None else float(util.gpu) / PERCENT,
        clocks_hertz=_clocks(nvml, handle),
        memory_bytes=_memory(nvml, handle),
    )


def read_gpus(nvml: Any | None) -> list[GpuReading]:
    """Every device NVML lists; [] without NVML or when the driver stops answering."""
    if nvml is None:
        return []
    try:
        return [read_gpu(nvml, i) for i in range(int(nvml.nvmlDeviceGetCount()))]
    except nvml.NVMLError:
        return []
