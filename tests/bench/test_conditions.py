import pytest

from bench.conditions import (
    from_cache_info,
    from_plan,
    from_vllm_args,
    merge,
    parse_overrides,
    split_args,
)
from bench.errors import BenchError
from budget.options import PlanOptions
from budget.plan_dict import plan_dict
from budget.planner import build_plan


def test_vllm_args_name_the_serving_settings():
    argv = split_args(
        "--max-num-seqs 4 --max-num-batched-tokens=2048 --kv-cache-dtype fp8 "
        "--no-enable-prefix-caching "
        """--speculative-config '{"method":"mtp","num_speculative_tokens":3}' """
        """--compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY","""
        """"cudagraph_capture_sizes":[4,8]}'"""
    )
    out = from_vllm_args(argv)
    assert out == {
        "max_num_seqs": 4,
        "chunk_size": 2048,
        "kv_cache_dtype": "fp8",
        "prefix_caching": False,
        "mtp_k": 3,
        "graph_mode": "FULL_DECODE_ONLY",
        "capture_sizes": [4, 8],
    }


def test_no_speculative_config_means_mtp_off_and_eager_means_no_graphs():
    out = from_vllm_args(["--enforce-eager"])
    assert out == {"graph_mode": "NONE", "mtp_k": 0}
    assert from_vllm_args([]) == {}


def test_plan_json_gives_settings_and_kv_tokens():
    plan = plan_dict(build_plan(PlanOptions(max_num_seqs=4, mtp=3)))
    out = from_plan(plan)
    assert out["mtp_k"] == 3
    assert out["max_num_seqs"] == 4
    assert out["plan_kv_tokens"] == plan["kv_cache_tokens"]
    assert out["graph_mode"] == "FULL_DECODE_ONLY"
    assert out["capture_sizes"] == [4, 8, 12, 16]


def test_cache_config_info_labels():
    info = {"cache_dtype": "auto", "enable_prefix_caching": "False", "block_size": "128"}
    assert from_cache_info(info) == {
        "kv_cache_dtype": "auto",
        "prefix_caching": False,
        "block_size": 128,
    }


def test_later_layers_win_and_sources_are_recorded():
    out = merge([("plan", {"mtp_k": 3, "chunk_size": 2048}), ("given", {"mtp_k": 1})])
    assert out["mtp_k"] == 1 and out["sources"]["mtp_k"] == "given"
    assert out["chunk_size"] == 2048 and out["sources"]["chunk_size"] == "plan"
    assert out["kv_cache_dtype"] is None


def test_overrides_parse_json_values_and_name_bad_pairs():
    assert parse_overrides(["mtp_k=2", "graph_mode=NONE", "prefix_caching=true"]) == {
        "mtp_k": 2,
        "graph_mode": "NONE",
        "prefix_caching": True,
    }
    with pytest.raises(BenchError, match="'oops'; expected key=value"):
        parse_overrides(["oops"])
