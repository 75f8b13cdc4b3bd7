"""Cross-checks against the source articles' own figures (docs/sources.md)."""

from __future__ import annotations

import math

import pytest

from budget.flags import vllm_args
from budget.graphs import seeds_capture_sizes
from budget.options import PlanOptions
from budget.planner import build_plan
from budget.profiles import GiB

ARTICLE_KV_TOKENS_CHUNK_2048 = 1_282_724
ARTICLE_KV_TOKENS_CHUNK_8192 = 1_249_637


@pytest.fixture(scope="module")
def default_plan():  # type: ignore[no-untyped-def]
    return build_plan(PlanOptions())


def test_lm_head_is_1_18_gib(default_plan) -> None:  # type: ignore[no-untyped-def]
    # 248,320 × 2,560 × 2 B
    assert round(default_plan.components["weights.lm_head"] / GiB, 2) == 1.18


def test_draft_vocab_slice_is_0_3125_gib() -> None:
    plan = build_plan(PlanOptions(draft_vocab=True))
    assert plan.components["draft_vocab_slice"] / GiB == 0.3125


def test_draft_vocab_saves_2_61_gib_per_mtp3_round() -> None:
    with_slice = build_plan(PlanOptions(draft_vocab=True))
    assert round(with_slice.speed.draft_vocab_saving_bytes / GiB, 2) == 2.61  # article: ≈2.61 GiB


def test_capture_sizes_for_k3_and_4_seqs() -> None:
    assert seeds_capture_sizes(3, 4) == (4, 8, 12, 16)


def test_default_plan_fits_on_dgx_spark(default_plan) -> None:  # type: ignore[no-untyped-def]
    assert default_plan.fits
    assert default_plan.settings.hardware.name == "dgx-spark"
    assert default_plan.settings.capture_sizes == (4, 8, 12, 16)
    assert "--kv-cache-memory-bytes" in vllm_args(default_plan)  # UMA: fix the pool


def test_default_plan_within_5_percent_of_the_articles_kv(default_plan) -> None:  # type: ignore[no-untyped-def]
    ratio = default_plan.kv_cache_tokens / ARTICLE_KV_TOKENS_CHUNK_2048
    assert abs(ratio - 1) < 0.05


def test_bigger_chunk_shrinks_kv_about_as_measured(default_plan) -> None:  # type: ignore[no-untyped-def]
    big = build_plan(PlanOptions(max_num_batched_tokens=8192))
    article_drop = 1 - ARTICLE_KV_TOKENS_CHUNK_8192 / ARTICLE_KV_TOKENS_CHUNK_2048  # ≈ 2.6 %
    drop = 1 - big.kv_cache_tokens / default_plan.kv_cache_tokens
    assert big.components["activation_peak"] > default_plan.components["activation_peak"]
    assert abs(drop - article_drop) < 0.015


def test_uma_start_check_passes_with_emitted_fraction(default_plan) -> None:  # type: ignore[no-untyped-def]
    """vLLM refuses to start unless MemAvailable ≥ ceil(total × utilization), even with
    --kv-cache-memory-bytes; on a Spark the default 0.92 would ask for more than is free."""
    args = vllm_args(default_plan)
    util = float(args[args.index("--gpu-memory-utilization") + 1])
    total = default_plan.settings.hardware.memory_bytes
    available = default_plan.mem_available_at_start_bytes
    assert math.ceil(total * util) <= available < math.ceil(total * 0.92)


def test_ple_lookups_per_chunk_match_the_articles(default_plan) -> None:  # type: ignore[no-untyped-def]
    # The articles: a 2,048-token chunk triggers ≈ 32,768 PLE row lookups.
    assert default_plan.ple_traffic["lookups_per_chunk"] == 32_768
