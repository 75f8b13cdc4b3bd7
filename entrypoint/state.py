"""The entrypoint's lifecycle, shared by the supervisor and the control endpoint."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

STARTING = "starting"
WARMING_UP = "warming_up"
READY = "ready"
UNHEALTHY = "unhealthy"  # vLLM stopped answering /health after ready
STOPPING = "stopping"
FAILED = "failed"  # vLLM exited or stayed unhealthy: the entrypoint exits 3
# Shown instead of the phase while available memory is under the watchdog's floor
# (entrypoint/watchdog.py): /ready is 503 whatever the phase underneath.
MEMORY_LOW = "memory_low"


@dataclass(frozen=True)
class Status:
    phase: str = STARTING
    vllm_up: bool = False
    started_at: float = field(default_factory=time.time)
    startup_seconds: float | None = None
    warmup_seconds: float | None = None
    warmup_steps: tuple[tuple[str, float], ...] = ()
    health_failures: int = 0
    memory_low: str | None = None  # why work is refused, while memory is under the floor
    memory_low_events: int = 0

    @property
    def ready(self) -> bool:
        return self.phase == READY and self.memory_low is None

    @property
    def shown_phase(self) -> str:
        """The phase /ready reports: `memory_low` while the watchdog refuses work."""
        return MEMORY_LOW if self.memory_low is not None else self.phase


class Lifecycle:
    """Thread-safe holder of the current Status (main thread writes, HTTP threads read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status = Status()

    @property
    def status(self) -> Status:
        with self._lock:
            return self._status

    def update(self, **changes: Any) -> Status:
        with self._lock:
            self._status = replace(self._status, **changes)
            return self._status

    def add_warmup_step(self, name: str, seconds: float) -> None:
        with self._lock:
            steps = (*self._status.warmup_steps, (name, seconds))
            self._status = replace(self._status, warmup_steps=steps)

    def memory(self, reason: str | None) -> Status:
        """Set (a reason) or clear (None) the watchdog's refusal; count each start of one."""
        with self._lock:
            status = self._status
            started = reason is not None and status.memory_low is None
            events = status.memory_low_events + int(started)
            self._status = replace(status, memory_low=reason, memory_low_events=events)
            return self._status

    def health(self, answered: bool) -> Status:
        """Record a health check after ready: READY ⇄ UNHEALTHY (never out of STOPPING/FAILED)."""
        with self._lock:
            status = self._status
            if status.phase in (STOPPING, FAILED):
                return status
            if answered:
                phase = READY if status.phase in (READY, UNHEALTHY) else status.phase
                self._status = replace(status, phase=phase, vllm_up=True)
                return self._status
            phase = UNHEALTHY if status.phase == READY else status.phase
            self._status = replace(
                status, phase=phase, vllm_up=False, health_failures=status.health_failures + 1
            )
            return self._status
