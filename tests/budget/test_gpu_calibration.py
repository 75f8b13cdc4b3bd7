"""Replay of the recorded H200 runs (vLLM 0.24.0, dummy weights; docs/gpu-calibration.md):
the planner's GPU terms must put the KV pool within 2 % of vLLM's `Available KV cache
memory`, and the KV arithmetic must give vLLM's logged token count exactly."""

from __future__ import annotations

import re

import pytest

from tools.calibration_table import DOC, Run, capacity_blocks, load_runs, table

GiB = 1024**3
LOG_ROUNDING_BYTES = 0.005 * GiB  # vLLM prints GiB with two decimals


@pytest.fixture(scope="module")
def runs() -> list[Run]:
    return load_runs()


def test_six_runs_recorded(runs: list[Run]) -> None:
    assert len(runs) == 6
    assert all("vllm" in run.log.lower() for run in runs)


def test_kv_pool_within_2_percent(runs: list[Run]) -> None:
    for run in runs:
        observed = run.observed.kv_cache_bytes
        assert observed, run.tag
        assert abs(run.plan.kv_cache_bytes / observed - 1) < 0.02, run.tag


def test_weights_within_1_percent(runs: list[Run]) -> None:
    for run in runs:
        assert run.observed.weights_bytes, run.tag
        assert abs(run.planned_weights / run.observed.weights_bytes - 1) < 0.01, run.tag


def test_hybrid_block_size_matches_vllm_line(runs: list[Run]) -> None:
    hybrids = [run for run in runs if run.tag.startswith("hybrid")]
    assert hybrids
    for run in hybrids:
        logged = re.search(r"Setting attention block size to (\d+) tokens", run.log)
        assert logged, run.tag
        assert capacity_blocks(run)[0] == int(logged[1]), run.tag


def test_kv_tokens_follow_exactly_from_the_pool(runs: list[Run]) -> None:
    """Some whole number of blocks inside the logged pool gives the logged tokens."""
    for run in runs:
        _, per_block, candidates = capacity_blocks(run)
        assert candidates, run.tag
        available = run.observed.kv_cache_bytes
        assert available is not None
        assert any(
            n * per_block <= available + LOG_ROUNDING_BYTES
            and (n + 1) * per_block > available - LOG_ROUNDING_BYTES
            for n in candidates
        ), run.tag


def test_bigger_chunk_costs_kv_in_plan_and_on_gpu(runs: list[Run]) -> None:
    by_tag = {run.tag: run for run in runs}
    small, big = by_tag["dense_seeds"], by_tag["dense_chunk8192"]
    assert big.plan.kv_cache_bytes < small.plan.kv_cache_bytes
    assert big.observed.kv_cache_bytes < small.observed.kv_cache_bytes  # type: ignore[operator]


def test_doc_table_is_current() -> None:
    assert table() in DOC.read_text(), "run `python -m tools.calibration_table --write`"


def test_the_dense_runs_profiling_peak_is_larger_than_planned_whatever_the_chunk() -> None:
    """docs/gpu-calibration.md: the dense shape's rest of the requested memory (140.4 GiB
    × 0.92 less the logged weights and pool) exceeds the plan's activation + runtime by
    about the same at chunk 2,048 and 8,192; the MoE and hybrid runs match the plan."""
    rest = {run.tag: run.profiled_rest for run in load_runs()}
    extra = {tag: (f.observed or 0) - (f.planned or 0) for tag, f in rest.items()}
    assert rest["dense_seeds"].observed == pytest.approx((140.4 * 0.92 - 15.00 - 112.38) * GiB)
    assert 0.35 * GiB < extra["dense_seeds"] < 0.55 * GiB
    assert abs(extra["dense_chunk8192"] - extra["dense_seeds"]) < 0.05 * GiB
    assert all(
        abs(extra[tag]) < 0.1 * GiB for tag in ("moe_seeds", "hybrid_seeds_nomtp", "hybrid_mtp3")
    )
