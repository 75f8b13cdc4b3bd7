"""Admission control: global and per-key concurrency limits with a bounded queue.

A request takes a slot at once when both its key and the gateway are under
their limits; otherwise it waits in a FIFO queue (a waiter blocked only by its
own key's limit does not hold up others).  Past `queue_size` waiters, or after
`queue_timeout_seconds`, it is refused with `Overloaded` (429 + Retry-After).
The global limit can be lowered at run time (thermal guard); while the entrypoint's
memory watchdog refuses work, every new request and every waiter is refused with
`MemoryLow` (503 + Retry-After), and requests already admitted go on.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from gateway.core.errors import MemoryLow, Overloaded


@dataclass(frozen=True)
class AdmissionLimits:
    max_concurrency: int
    max_concurrency_per_key: int
    queue_size: int
    queue_timeout_seconds: float
    retry_after_seconds: int


class Slots(Protocol):
    """What a forwarded request takes and gives back: an `Admission`, or one held by the
    standalone gateway's parent process for its workers (gateway/standalone/workers.py)."""

    async def acquire(self, key: str) -> float: ...

    def release(self, key: str) -> None: ...


class Admission:
    """Counts slots in use; `acquire` returns the seconds spent waiting."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self._limits = limits
        self.limit = limits.max_concurrency
        self.active = 0
        self._per_key: dict[str, int] = {}
        self._waiters: deque[tuple[str, asyncio.Future[None]]] = deque()
        self.memory_low = False

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _can_run(self, key: str) -> bool:
        per_key = self._per_key.get(key, 0)
        return self.active < self.limit and per_key < self._limits.max_concurrency_per_key

    def _take(self, key: str) -> None:
        self.active += 1
        self._per_key[key] = self._per_key.get(key, 0) + 1

    def try_take(self, key: str) -> bool:
        """Take a slot at once if `acquire` would, without waiting (False: call it)."""
        if self.memory_low or not self._can_run(key):
            return False
        self._take(key)
        return True

    async def acquire(self, key: str) -> float:
        if self.try_take(key):
            return 0.0
        if self.memory_low:
            raise self._memory_refusal()
        if len(self._waiters) >= self._limits.queue_size:
            raise self._refuse("queue_full", "Too many requests are waiting; retry later.")
        started = time.monotonic()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (key, future)
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self._limits.queue_timeout_seconds):
                await future
        except BaseException as exc:
            self._abandon(waiter)
            if isinstance(exc, TimeoutError):
                raise self._refuse("queue_timeout", "No capacity in time; retry later.") from None
            raise
        return time.monotonic() - started

    def _abandon(self, waiter: tuple[str, asyncio.Future[None]]) -> None:
        key, future = waiter
        if future.done() and not future.cancelled() and future.exception() is None:
            self.release(key)  # granted just as the wait ended: give it back
        elif waiter in self._waiters:  # else refused by `set_memory_low`, already out
            future.cancel()
            self._waiters.remove(waiter)

    def set_memory_low(self, low: bool) -> None:
        """Refuse (True) or admit again (False); refusing also ends every wait."""
        self.memory_low = low
        while low and self._waiters:
            _, future = self._waiters.popleft()
            future.set_exception(self._memory_refusal())

    def _memory_refusal(self) -> MemoryLow:
        return MemoryLow(
            "The model server is short of memory and admits no new work; retry later.",
            reason="memory_low",
            retry_after_seconds=self._limits.retry_after_seconds,
        )

    def release(self, key: str) -> None:
        self.active -= 1
        remaining = self._per_key[key] - 1
        if remaining:
            self._per_key[key] = remaining
        else:
            del self._per_key[key]
        self._wake()

    def set_limit(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._wake()

    def _wake(self) -> None:
        """Grant slots to the oldest waiters that can run, keeping the queue order."""
        for waiter in list(self._waiters):
            if self.active >= self.limit:
                return
            key, future = waiter
            if self._can_run(key):
                self._waiters.remove(waiter)
                self._take(key)
                future.set_result(None)

    def _refuse(self, reason: str, message: str) -> Overloaded:
        return Overloaded(
            message, reason=reason, retry_after_seconds=self._limits.retry_after_seconds
        )
