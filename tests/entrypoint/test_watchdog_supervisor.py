"""The memory watchdog in the supervisor, on a fake vLLM (tests/entrypoint/fake_vllm.py).

Memory running short is an error path that real pressure on a shared test host cannot
give safely or repeatably, so the reading is injected here (`Pressure`); the same path
under real pressure, in a container with a memory limit, is tests/docker/test_stack_memory.py.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, replace

import httpx
import pytest

from budget.units import GiB
from entrypoint.errors import EXIT_MEMORY_LOW, MemoryLowError
from entrypoint.hardware import HostMemory
from tests.entrypoint.test_supervisor_errors import (  # noqa: F401 (a fixture)
    FakeRun,
    alive_in_group,
    signal_handlers,
)

FLOOR = 2 * GiB


@dataclass
class Pressure:
    """What the watchdog reads: available memory as the test sets it."""

    available_bytes: int = 6 * GiB

    def read(self) -> HostMemory:
        return HostMemory(8 * GiB, self.available_bytes, self.available_bytes)


@pytest.fixture
def watched(tiny_plan, console, tmp_path):
    runs: list[FakeRun] = []

    def start(pressure: Pressure, **settings: str) -> FakeRun:
        timing = {"SPARKSERVE_MEMORY_HOLD_SECONDS": "0.5", "SPARKSERVE_MEMORY_DRAIN_SECONDS": "1"}
        run = FakeRun(tiny_plan, console, tmp_path, **{**timing, **settings})
        run.ctx = replace(run.ctx, memory_floor_bytes=FLOOR, read_memory=pressure.read)
        runs.append(run)
        return run.start()

    yield start
    for run in runs:
        run.close()


def _ready(run: FakeRun) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{run.control.port}/ready", timeout=2)


def test_under_the_floor_refuses_work_then_stops_vllm_with_exit_4(watched) -> None:
    pressure = Pressure()
    run = watched(pressure, FAKE_VLLM_GRANDCHILD="1")
    group = run.vllm_group()
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200")
    pressure.available_bytes = FLOOR - GiB // 4  # under the floor, above half of it
    run.wait_for(lambda: _ready(run).json()["phase"] == "memory_low", "phase memory_low")
    refused = _ready(run)
    assert refused.status_code == 503
    assert "under the floor 2.00 GiB" in refused.json()["reason"]
    result = run.finish()
    assert isinstance(result, MemoryLowError) and result.exit_code == EXIT_MEMORY_LOW == 4
    assert "available memory 1.75 GiB under the floor 2.00 GiB" in str(result)
    assert "refusing new work (/ready 503, memory_low)" in run.output()
    assert "stopping vLLM (SIGTERM, SIGKILL after 1 s)" in run.output()
    assert alive_in_group(group) == []  # vLLM and its engine, gone


def test_a_vllm_that_ignores_sigterm_is_killed_after_the_grace(watched) -> None:
    pressure = Pressure()
    run = watched(pressure, FAKE_VLLM_IGNORE_SIGTERM="1", FAKE_VLLM_GRANDCHILD="1")
    group = run.vllm_group()
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200")
    pressure.available_bytes = 0
    result = run.finish()
    assert isinstance(result, MemoryLowError)
    assert "vLLM stopped (killed by SIGKILL" in run.output()
    assert alive_in_group(group) == []


@pytest.mark.usefixtures("signal_handlers")
def test_memory_back_above_the_floor_admits_again_and_serving_goes_on(watched) -> None:
    pressure = Pressure()
    run = watched(pressure, SPARKSERVE_MEMORY_DRAIN_SECONDS="600")
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200")
    pressure.available_bytes = FLOOR - 1
    run.wait_for(lambda: run.ready_status() == 503, "/ready 503")
    pressure.available_bytes = FLOOR
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200 again")
    assert "back above the floor: work admitted" in run.output()
    assert run.result is None  # still supervising
    run.signals.request(signal.SIGTERM)
    assert run.finish() == 0


def test_the_watchdog_also_watches_the_start(watched) -> None:
    """The start is when GB10 hosts hang most (vllm#46307): no waiting for ready."""
    pressure = Pressure(available_bytes=0)
    run = watched(pressure, FAKE_VLLM_LISTEN="never")
    result = run.finish()
    assert isinstance(result, MemoryLowError)
    assert "during" not in str(result) and run.lifecycle.status.ready is False
