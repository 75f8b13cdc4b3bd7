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


@dataclass(frozen=True)
class Status:
    phase: str = STARTING
    vllm_up: bool = False
    started_at: float = field(default_factory=time.time)
    startup_seconds: float | None = None
    warmup_seconds: float | None = None
    warmup_steps: tuple[tuple[str, float], ...] = ()
    health_failures: int = 0

    @property
    def ready(self) -> bool:
        return self.phase == READY


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
