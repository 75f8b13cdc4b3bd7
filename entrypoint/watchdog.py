"""The memory watchdog: act before the host does.

On unified memory (DGX Spark's GB10) memory running out does not end in an OOM kill:
the driver fails with NV_ERR_NO_MEMORY and the host hangs or resets
(NVIDIA/open-gpu-kernel-modules#1358, NVIDIA/dgx-spark-playbooks#97, vllm#46307).
So once available memory (entrypoint/memory.py) has stayed under the floor for the
hold time, the entrypoint stops admitting work (`/ready` 503, phase `memory_low`; the
gateway answers 503 with Retry-After); if it is still under the floor after the
drain time, or falls under half the floor meanwhile, vLLM is stopped (SIGTERM, then
SIGKILL after the grace period) and the entrypoint exits 4, for the container's
restart policy to bring it back. Memory back above the floor in between reopens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NoReturn

from budget.plan import Plan
from budget.units import GiB
from entrypoint.config import EntrypointConfig
from entrypoint.errors import ConfigError
from entrypoint.hardware import HostMemory
from entrypoint.state import Lifecycle

Verdict = Literal["ok", "low", "stop"]
# Where the plan keeps no system reserve (the CPU device, custom hardware): this share
# of the memory, as the earlier host-memory alert used.
FALLBACK_FLOOR_FRACTION = 0.05
# Half the plan's system reserve: the other half is what the OS, the container and
# the driver use in steady state; below it, they eat into the driver's own margin.
RESERVE_SHARE = 0.5
# Under this share of the floor while draining, vLLM is stopped at once.
HARD_FLOOR_SHARE = 0.5


def default_floor_bytes(plan: Plan, total_bytes: int) -> int:
    """Half the plan's `system_reserve`, or 5 % of `total_bytes` where it has none."""
    reserve = plan.components.get("system_reserve", 0)
    if reserve > 0:
        return int(reserve * RESERVE_SHARE)
    return int(total_bytes * FALLBACK_FLOOR_FRACTION)


def floor_bytes(config: EntrypointConfig, plan: Plan, total_bytes: int) -> int:
    """The floor in bytes (0 = off); ConfigError for one above the machine's memory.

    Without SPARKSERVE_MEMORY_FLOOR_GIB the watchdog runs on unified memory only: on a
    discrete GPU the host's own OOM killer works."""
    given = config.memory_floor_gib
    if given is None:
        return default_floor_bytes(plan, total_bytes) if plan.settings.hardware.uma else 0
    floor = int(given * GiB)
    if floor >= total_bytes:
        raise ConfigError(
            f"SPARKSERVE_MEMORY_FLOOR_GIB={given:g}: above this machine's memory "
            f"({total_bytes / GiB:.1f} GiB); must be below it (0 turns the watchdog off)"
        )
    return floor


def watchdog_line(config: EntrypointConfig, floor: int) -> str:
    if floor <= 0:
        return "memory watchdog: off (SPARKSERVE_MEMORY_FLOOR_GIB=0, or not unified memory)"
    return (
        f"memory watchdog: floor {gib(floor)} of available memory; under it for "
        f"{config.memory_hold_seconds:g} s → /ready 503 (memory_low), "
        f"{config.memory_drain_seconds:g} s more → vLLM stopped, exit 4"
    )


@dataclass
class MemoryWatchdog:
    """The floor's state machine, fed (time, available bytes); pure, no I/O."""

    floor_bytes: int
    hold_seconds: float
    drain_seconds: float
    under_since: float | None = None
    low_since: float | None = None

    def observe(self, now: float, available_bytes: int) -> Verdict:
        if available_bytes >= self.floor_bytes:
            self.under_since = self.low_since = None
            return "ok"
        if self.under_since is None:
            self.under_since = now
        if self.low_since is None:
            if now - self.under_since < self.hold_seconds:
                return "ok"
            self.low_since = now
        if available_bytes < self.floor_bytes * HARD_FLOOR_SHARE:
            return "stop"
        return "stop" if now - self.low_since >= self.drain_seconds else "low"


def gib(value_bytes: int) -> str:
    return f"{value_bytes / GiB:.2f} GiB"


class MemoryGuard:
    """The watchdog at work in the supervisor: reads memory every `READ_SECONDS`, sets
    and clears the lifecycle's refusal, and calls `stop` (which does not return) when
    vLLM must go."""

    READ_SECONDS = 0.5

    def __init__(
        self,
        watchdog: MemoryWatchdog,
        read: Callable[[], HostMemory],
        lifecycle: Lifecycle,
        say: Callable[[str], None],
    ) -> None:
        self.watchdog = watchdog
        self.read = read
        self.lifecycle = lifecycle
        self.say = say
        self.last_read: float | None = None

    def tick(self, now: float, stop: Callable[[str], NoReturn]) -> None:
        if self.last_read is not None and now - self.last_read < self.READ_SECONDS:
            return
        self.last_read = now
        available = self.read().available_bytes
        verdict = self.watchdog.observe(now, available)
        floor = self.watchdog.floor_bytes
        shown = f"available memory {gib(available)} under the floor {gib(floor)}"
        if verdict == "stop":
            self.lifecycle.memory(f"{shown} (SPARKSERVE_MEMORY_FLOOR_GIB): stopping vLLM")
            stop(f"{shown} (SPARKSERVE_MEMORY_FLOOR_GIB)")
        refusing = self.lifecycle.status.memory_low is not None
        if verdict == "low" and not refusing:
            self.lifecycle.memory(f"{shown} (SPARKSERVE_MEMORY_FLOOR_GIB)")
            self.say(
                f"{shown} for {self.watchdog.hold_seconds:g} s: refusing new work (/ready "
                f"503, memory_low); vLLM stops in {self.watchdog.drain_seconds:g} s "
                "unless memory comes back"
            )
        elif verdict == "ok" and refusing:
            self.lifecycle.memory(None)
            self.say(f"available memory {gib(available)} back above the floor: work admitted")
