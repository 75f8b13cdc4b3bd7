"""What machine are we on: NVML's GPU name and memory, UMA, and the host's memory.

Used only when SPARKSERVE_HARDWARE is unset (and by pre-flight). A GPU whose
name matches a budget hardware profile gets that profile; any other GPU becomes
custom hardware of its NVML memory; no GPU → device cpu sized by MemTotal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psutil

from budget.units import GiB
from entrypoint.nvml import GpuReading

# NVML device-name fragments → budget/profiles/hardware/<name>.toml (first match wins).
PROFILE_BY_GPU_NAME = (
    ("GB10", "dgx-spark"),
    ("H200", "h200"),
    ("H100", "h100-80gb"),
    ("RTX PRO 6000", "rtx-pro-6000"),
    ("RTX 5090", "rtx-5090"),
    ("RTX 5060 Ti", "rtx-5060ti-16gb"),
    ("RTX 4090", "rtx-4090"),
)
# Integrated GPUs that share system memory (NVML memory is "Not Supported" there).
UMA_GPU_NAMES = ("GB10",)


@dataclass(frozen=True)
class HostMemory:
    """/proc/meminfo's MemTotal, MemAvailable and MemFree.

    On unified memory the two free figures differ by the page cache: MemAvailable counts
    reclaimable file pages as free, MemFree does not, and GB10's CUDA driver reports
    MemFree as the GPU's free memory (docs/dgx-spark.md).
    """

    total_bytes: int
    available_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class Machine:
    """The detected machine; `profile` is None for hardware no profile describes."""

    device: str
    gpu_name: str | None
    gpu_count: int
    profile: str | None
    memory_gib: float
    uma: bool
    host: HostMemory

    def describe(self) -> str:
        kind = "unified memory" if self.uma else "discrete"
        what = f"{self.gpu_count} × {self.gpu_name}" if self.gpu_name else "no GPU (cpu)"
        profile = self.profile or ("cpu" if self.device == "cpu" else "custom")
        return f"{what}, {self.memory_gib:.1f} GiB {kind} → hardware {profile}"


def host_memory() -> HostMemory:
    """MemTotal, MemAvailable and MemFree (psutil reads /proc/meminfo, as vLLM does)."""
    vm = psutil.virtual_memory()
    return HostMemory(
        total_bytes=int(vm.total), available_bytes=int(vm.available), free_bytes=int(vm.free)
    )


def profile_for(gpu_name: str) -> str | None:
    for fragment, profile in PROFILE_BY_GPU_NAME:
        if fragment.lower() in gpu_name.lower():
            return profile
    return None


def _is_uma(gpu: GpuReading) -> bool:
    return gpu.memory_bytes is None or any(n in gpu.name for n in UMA_GPU_NAMES)


def detect(gpus: list[GpuReading], read_host: Callable[[], HostMemory] = host_memory) -> Machine:
    host = read_host()
    if not gpus:
        return Machine("cpu", None, 0, None, host.total_bytes / GiB, True, host)
    first = gpus[0]
    uma = _is_uma(first)
    memory = host.total_bytes if uma or first.memory_bytes is None else first.memory_bytes["total"]
    return Machine("cuda", first.name, len(gpus), profile_for(first.name), memory / GiB, uma, host)
