"""Admission: limits, FIFO queue, per-key fairness, refusals, thermal limit."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.admission import Admission, AdmissionLimits
from gateway.core.errors import MemoryLow, Overloaded


def _admission(limit: int = 2, per_key: int = 2, queue: int = 2, timeout: float = 1.0) -> Admission:
    return Admission(AdmissionLimits(limit, per_key, queue, timeout, retry_after_seconds=3))


def test_immediate_then_queued_then_refused() -> None:
    async def scenario() -> None:
        gate = _admission(limit=1, queue=1)
        assert await gate.acquire("a") == 0.0
        waiter = asyncio.create_task(gate.acquire("b"))
        await asyncio.sleep(0)
        with pytest.raises(Overloaded) as refused:
            await gate.acquire("c")
        assert refused.value.reason == "queue_full" and refused.value.headers() == {
            "retry-after": "3"
        }
        gate.release("a")
        assert await waiter >= 0.0
        assert (gate.active, gate.waiting) == (1, 0)

    asyncio.run(scenario())


def test_queue_timeout() -> None:
    async def scenario() -> None:
        gate = _admission(limit=1, timeout=0.05)
        await gate.acquire("a")
        with pytest.raises(Overloaded) as refused:
            await gate.acquire("b")
        assert refused.value.reason == "queue_timeout"
        assert gate.waiting == 0

    asyncio.run(scenario())


def test_per_key_limit_does_not_block_other_keys() -> None:
    async def scenario() -> None:
        gate = _admission(limit=3, per_key=1)
        await gate.acquire("a")
        blocked = asyncio.create_task(gate.acquire("a"))
        await asyncio.sleep(0)
        assert await gate.acquire("b") == 0.0  # global room left: b is not held up by a's waiter
        assert not blocked.done()
        gate.release("a")
        await blocked
        assert gate.active == 2

    asyncio.run(scenario())


def test_cancelled_waiter_leaves_no_trace() -> None:
    async def scenario() -> None:
        gate = _admission(limit=1)
        await gate.acquire("a")
        waiter = asyncio.create_task(gate.acquire("b"))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.release("a")
        assert (gate.active, gate.waiting) == (0, 0)

    asyncio.run(scenario())


def test_lowered_limit_applies_to_new_requests_and_raising_wakes() -> None:
    async def scenario() -> None:
        gate = _admission(limit=4)
        gate.set_limit(1)
        await gate.acquire("a")
        waiter = asyncio.create_task(gate.acquire("b"))
        await asyncio.sleep(0)
        assert not waiter.done()
        gate.set_limit(4)
        await waiter
        assert gate.active == 2

    asyncio.run(scenario())


def test_memory_low_refuses_new_and_waiting_requests_with_503_and_then_admits() -> None:
    async def scenario() -> None:
        gate = _admission(limit=1, queue=2)
        await gate.acquire("a")  # admitted before memory ran short: it goes on
        waiter = asyncio.create_task(gate.acquire("b"))
        await asyncio.sleep(0)
        gate.set_memory_low(True)
        with pytest.raises(MemoryLow):
            await waiter
        with pytest.raises(MemoryLow) as refused:
            await gate.acquire("c")
        error = refused.value
        assert (error.status_code, error.code, error.reason) == (503, "memory_low", "memory_low")
        assert error.headers() == {"retry-after": "3"}
        assert (gate.active, gate.waiting) == (1, 0)
        gate.release("a")
        gate.set_memory_low(False)
        assert await gate.acquire("c") == 0.0

    asyncio.run(scenario())
