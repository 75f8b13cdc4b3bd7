"""Config parsing: flat and text_config layouts, layer kinds, dtypes, clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from budget.errors import BudgetError
from budget.model import model_from_config
from budget.profiles import load_model
from budget.weights import active_params_per_token, main_model_params

QWEN3_NEXT_FLAT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 8,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}


def test_full_attention_every_interval_th_layer() -> None:
    spec = model_from_config(QWEN3_NEXT_FLAT, "x", "test")
    assert [i for i, t in enumerate(spec.layer_types) if t == "full_attention"] == [3, 7]
    assert spec.num_gdn_layers == 6


def test_text_config_layout_with_layer_types_and_fp32_ssm() -> None:
    inner = {k: v for k, v in QWEN3_NEXT_FLAT.items() if k != "full_attention_interval"}
    inner["layer_types"] = ["linear_attention", "full_attention"] * 4
    inner["mamba_ssm_dtype"] = "float32"
    nested = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "text_config": inner}
    spec = model_from_config(nested, "x", "test")
    assert spec.num_full_attention_layers == 4
    assert spec.gdn is not None and spec.gdn.ssm_dtype_bytes == 4
    assert spec.architecture == "Qwen3_5MoeForConditionalGeneration"


def test_ssm_dtype_defaults_to_model_dtype() -> None:
    spec = model_from_config(QWEN3_NEXT_FLAT, "x", "test")
    assert spec.gdn is not None and spec.gdn.ssm_dtype_bytes == 2


def test_missing_field_is_named() -> None:
    cfg = dict(QWEN3_NEXT_FLAT)
    del cfg["linear_key_head_dim"]
    with pytest.raises(BudgetError, match="'linear_key_head_dim' is missing"):
        model_from_config(cfg, "x", "cfg.json")


def test_unknown_layer_kind_is_named() -> None:
    cfg = dict(QWEN3_NEXT_FLAT, layer_types=["full_attention"] * 7 + ["sliding_mamba"])
    with pytest.raises(BudgetError, match="unsupported kind 'sliding_mamba'"):
        model_from_config(cfg, "x", "cfg.json")


def test_bad_dtype_lists_allowed() -> None:
    with pytest.raises(BudgetError, match="torch_dtype.*allowed"):
        model_from_config(dict(QWEN3_NEXT_FLAT, torch_dtype="float8"), "x", "cfg.json")


def test_negative_field_rejected() -> None:
    with pytest.raises(BudgetError, match="'hidden_size'=-1; must be a positive integer"):
        model_from_config(dict(QWEN3_NEXT_FLAT, hidden_size=-1), "x", "cfg.json")


def test_qwen3_next_80b_parameter_counts_match_published() -> None:
    # docs/sources.md: 79,674,391,296 parameters, 3,874,929,408 active (HF model card).
    spec = load_model("qwen3-next-80b-a3b").spec
    params = main_model_params(spec)
    assert sum(params.values()) == 79_674_391_296
    assert active_params_per_token(spec) + params["embeddings"] == 3_874_929_408


def test_public_dense_and_moe_sizes() -> None:
    # Llama-3.1-8B: 8.03 B; Qwen3-30B-A3B: 30.5 B total, 3.3 B active (model cards).
    llama = sum(main_model_params(load_model("llama-3.1-8b").spec).values())
    assert 8.0e9 < llama < 8.06e9
    qwen = load_model("qwen3-30b-a3b").spec
    assert 30.4e9 < sum(main_model_params(qwen).values()) < 30.6e9
    assert 3.2e9 < active_params_per_token(qwen) + 151936 * 2048 < 3.4e9


def test_default_profile_totals_match_the_articles() -> None:
    # The articles: 125 B language-model parameters, ≈6 B active.
    spec = load_model("qwen3.8-flash-next").spec
    total = sum(main_model_params(spec).values())
    assert abs(total - 125e9) / 125e9 < 0.02
    assert 5.5e9 < active_params_per_token(spec) + spec.vocab_size * spec.hidden_size < 6.5e9


def test_model_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_NEXT_FLAT))
    profile = load_model(str(tmp_path))
    assert profile.model_dir == str(tmp_path) and profile.spec.num_layers == 8


def test_malformed_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BudgetError, match="config.json is unreadable"):
        load_model(str(tmp_path))


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(BudgetError, match="no config.json"):
        load_model(str(tmp_path))
