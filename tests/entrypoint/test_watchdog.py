"""The memory watchdog: its state machine on given times, the floor's default and
limits, what /ready and /metrics say, and the one-line refusal of a floor too high."""

from __future__ import annotations

import httpx
import psutil
import pytest

from budget.options import PlanOptions
from budget.planner import build_plan
from budget.units import GiB
from entrypoint.config import load_config
from entrypoint.control import ControlServer
from entrypoint.errors import ConfigError
from entrypoint.hardware import HostMemory
from entrypoint.logscan import LogWatcher
from entrypoint.metrics import build_registry
from entrypoint.state import READY, Lifecycle
from entrypoint.watchdog import MemoryWatchdog, default_floor_bytes, floor_bytes
from tests.entrypoint.test_cli import run_entrypoint

FLOOR = 4 * GiB


def _dog() -> MemoryWatchdog:
    return MemoryWatchdog(FLOOR, hold_seconds=3.0, drain_seconds=10.0)


def test_a_dip_shorter_than_the_hold_time_does_not_trip() -> None:
    dog = _dog()
    assert dog.observe(0.0, FLOOR - 1) == "ok"
    assert dog.observe(2.9, FLOOR - 1) == "ok"
    assert dog.observe(3.0, FLOOR) == "ok"  # back at the floor: the hold starts again
    assert dog.observe(5.0, FLOOR - 1) == "ok"
    assert dog.observe(7.9, FLOOR - 1) == "ok"


def test_under_the_floor_for_the_hold_time_refuses_then_stops_after_the_drain() -> None:
    dog = _dog()
    dog.observe(0.0, FLOOR - 1)
    assert dog.observe(3.0, FLOOR - 1) == "low"
    assert dog.observe(12.9, FLOOR - 1) == "low"
    assert dog.observe(13.0, FLOOR - 1) == "stop"


def test_memory_back_above_the_floor_while_refusing_reopens() -> None:
    dog = _dog()
    dog.observe(0.0, FLOOR - 1)
    assert dog.observe(3.0, FLOOR - 1) == "low"
    assert dog.observe(4.0, FLOOR + 1) == "ok"
    assert dog.observe(5.0, FLOOR - 1) == "ok"  # a new hold, not the old drain
    assert dog.observe(8.0, FLOOR - 1) == "low"


def test_under_half_the_floor_while_refusing_stops_at_once() -> None:
    dog = _dog()
    dog.observe(0.0, FLOOR - 1)
    assert dog.observe(3.0, FLOOR - 1) == "low"
    assert dog.observe(3.5, FLOOR // 2 - 1) == "stop"


def test_under_half_the_floor_still_waits_the_hold_time() -> None:
    """One sample of a sudden drop can be a reading between two allocations."""
    dog = _dog()
    assert dog.observe(0.0, 0) == "ok"
    assert dog.observe(3.0, 0) == "stop"


def _plan(**options: object):
    return build_plan(PlanOptions(**options))  # type: ignore[arg-type]


def test_the_default_floor_is_half_the_plans_system_reserve_on_a_spark() -> None:
    plan = _plan(model="qwen3.8-flash-next", hardware="dgx-spark")
    reserve = plan.components["system_reserve"]
    assert reserve > 0
    config = load_config({"SPARKSERVE_MODEL": "qwen3.8-flash-next"})
    assert floor_bytes(config, plan, 128 * GiB) == reserve // 2


def test_without_a_reserve_the_floor_is_a_twentieth_of_the_memory(tiny_model_dir) -> None:
    plan = _plan(model=str(tiny_model_dir), device="cpu")
    assert plan.components.get("system_reserve", 0) == 0
    assert default_floor_bytes(plan, 20 * GiB) == GiB


def test_on_a_discrete_gpu_the_watchdog_runs_only_when_a_floor_is_given(tiny_model_dir) -> None:
    plan = _plan(model=str(tiny_model_dir), hardware="rtx-4090", device="cuda")
    assert not plan.settings.hardware.uma
    assert floor_bytes(load_config({"SPARKSERVE_MODEL": "m"}), plan, 64 * GiB) == 0
    given = load_config({"SPARKSERVE_MODEL": "m", "SPARKSERVE_MEMORY_FLOOR_GIB": "2.5"})
    assert floor_bytes(given, plan, 64 * GiB) == int(2.5 * GiB)


def test_zero_turns_it_off_and_a_floor_above_the_memory_is_refused(tiny_model_dir) -> None:
    plan = _plan(model=str(tiny_model_dir), device="cpu")
    off = load_config({"SPARKSERVE_MODEL": "m", "SPARKSERVE_MEMORY_FLOOR_GIB": "0"})
    assert floor_bytes(off, plan, 8 * GiB) == 0
    high = load_config({"SPARKSERVE_MODEL": "m", "SPARKSERVE_MEMORY_FLOOR_GIB": "9"})
    with pytest.raises(ConfigError, match="SPARKSERVE_MEMORY_FLOOR_GIB=9: above"):
        floor_bytes(high, plan, 8 * GiB)


@pytest.mark.parametrize("raw", ["-1", "lots", "nan", "inf"])
def test_a_malformed_floor_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match="SPARKSERVE_MEMORY_FLOOR_GIB=.*GiB >= 0"):
        load_config({"SPARKSERVE_MODEL": "m", "SPARKSERVE_MEMORY_FLOOR_GIB": raw})


def test_a_floor_above_this_machines_memory_is_one_line_and_exit_2(tiny_model_dir) -> None:
    too_high = psutil.virtual_memory().total / GiB + 1
    done = run_entrypoint(
        "--dry-run",
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_DEVICE="cpu",
        SPARKSERVE_MEMORY_FLOOR_GIB=f"{too_high:.1f}",
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "SPARKSERVE_MEMORY_FLOOR_GIB" in done.stderr and "above this machine's memory" in (
        done.stderr
    )


def test_ready_says_memory_low_and_why_and_the_metrics_count_it(tiny_plan) -> None:
    host = HostMemory(total_bytes=8 * GiB, available_bytes=GiB, free_bytes=GiB // 2)
    lifecycle = Lifecycle()
    registry = build_registry(
        tiny_plan,
        LogWatcher(),
        lifecycle,
        {"model": "dense"},
        read_gpus=list,
        read_host=lambda: host,
        memory_floor_bytes=2 * GiB,
    )
    server = ControlServer("127.0.0.1", 0, lifecycle, registry)
    server.start()
    try:
        lifecycle.update(phase=READY)
        lifecycle.memory("available memory 1.00 GiB under the floor 2.00 GiB")
        answer = httpx.get(f"http://127.0.0.1:{server.port}/ready", timeout=5)
        assert answer.status_code == 503
        assert answer.json() == {
            "ready": False,
            "phase": "memory_low",
            "reason": "available memory 1.00 GiB under the floor 2.00 GiB",
        }
        lifecycle.memory(None)
        assert httpx.get(f"http://127.0.0.1:{server.port}/ready", timeout=5).status_code == 200
    finally:
        server.close()
    value = registry.get_sample_value
    assert value("sparkserve_memory_low") == 0
    assert value("sparkserve_memory_low_events_total") == 1
    kinds = {k: value("sparkserve_host_memory_bytes", {"kind": k}) for k in ("free", "floor")}
    assert kinds == {"free": GiB // 2, "floor": 2 * GiB}
