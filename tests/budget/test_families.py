"""Each vLLM architecture family the planner claims plans; every other one is refused
in one line naming it (exit 2), never planned as something it is not.

The configs are shaped like the public ones of each family (fields the planner or vLLM
reads; sizes shrunk), run through `python -m budget plan --model DIR` as a user would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main
from devtools.tiny_model import config_for

BASE: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
QWEN3_NEXT = config_for("hybrid")
QWEN3_5 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        **{
            k: v
            for k, v in QWEN3_NEXT.items()
            if k not in ("architectures", "full_attention_interval")
        },
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "mamba_ssm_dtype": "float32",
    },
}
CLAIMED: dict[str, dict[str, Any]] = {
    "llama": {**BASE, "architectures": ["LlamaForCausalLM"]},
    "qwen3": {**BASE, "architectures": ["Qwen3ForCausalLM"], "sliding_window": None},
    "qwen2-window-off": {
        **BASE,
        "architectures": ["Qwen2ForCausalLM"],
        "sliding_window": 131072,
        "use_sliding_window": False,
    },
    "qwen3-moe": config_for("moe"),
    "qwen3-next": QWEN3_NEXT,
    "qwen3.5": QWEN3_5,
    "gpt-oss": config_for("gpt-oss"),
    "gemma3": config_for("gemma3"),
    "gemma4": config_for("gemma4"),
    "gemma4-padded": config_for("gemma4-padded"),
    "gemma4-moe": config_for("gemma4")
    | {"num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32},
    "nemotron-h": config_for("nemotron-h"),
    "nemotron-3": config_for("nemotron-3"),
    "granite-4.0-h": config_for("granite-4-h"),
    "falcon-h1": config_for("falcon-h1"),
    "gemma3-multimodal": config_for("gemma3-mm"),
    "gemma4-multimodal": {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "text_config": config_for("gemma4"),
        "vision_config": {"model_type": "gemma4_vision"},
    },
}
# Not modelled: name in the refusal, and the config (from its family's public layout).
REFUSED: dict[str, tuple[str, dict[str, Any]]] = {
    "nemotron-h-sliding": (
        "sliding_window=4096 beside Mamba-2 layers",
        config_for("nemotron-h") | {"sliding_window": 4096},
    ),
    "zamba2": ("Zamba2ForCausalLM", {**BASE, "architectures": ["Zamba2ForCausalLM"]}),
    "gemma4-explicit-per-layer-config": (
        "'per_layer_config'",
        config_for("gemma4") | {"per_layer_config": {"1": {"head_dim": 256}}},
    ),
    "gemma4-bidirectional": (
        "use_bidirectional_attention='all'",
        config_for("gemma4") | {"use_bidirectional_attention": "all"},
    ),
    "jamba": ("JambaForCausalLM", {**BASE, "architectures": ["JambaForCausalLM"]}),
    "mamba2": ("Mamba2ForCausalLM", {**BASE, "architectures": ["Mamba2ForCausalLM"]}),
    "mamba-fields-under-a-llama-name": (
        "'mamba_d_state'",
        {**BASE, "architectures": ["LlamaForCausalLM"], "mamba_d_state": 128},
    ),
    "deepseek-v3": (
        "DeepseekV3ForCausalLM",
        {**BASE, "architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512},
    ),
    "mla-under-a-qwen3-name": (
        "kv_lora_rank",
        {**BASE, "architectures": ["Qwen3ForCausalLM"], "kv_lora_rank": 512},
    ),
    "llama4-chunked": (
        "attention_chunk_size",
        {**BASE, "architectures": ["LlamaForCausalLM"], "attention_chunk_size": 8192},
    ),
    "mistral-window-everywhere": (
        "sliding_window=4096 on every layer",
        {**BASE, "architectures": ["MistralForCausalLM"], "sliding_window": 4096},
    ),
    "gdn-layers-under-a-qwen3-moe-name": (
        "Gated-DeltaNet layers under architecture 'Qwen3MoeForCausalLM'",
        config_for("hybrid") | {"architectures": ["Qwen3MoeForCausalLM"]},
    ),
    "qwen2.5-vl": (
        "Qwen2_5_VLForConditionalGeneration",
        {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "text_config": BASE},
    ),
}


def _model_dir(tmp_path: Path, config: dict[str, Any]) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize("name", CLAIMED)
def test_a_claimed_family_plans(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--model", _model_dir(tmp_path, CLAIMED[name]), "--hardware", "dgx-spark"]
    assert main([*args, "--json"]) in (0, 1), capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["kv_cache_tokens"] > 0


@pytest.mark.parametrize("name", REFUSED)
def test_an_unmodelled_family_is_refused_in_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    named, config = REFUSED[name]
    assert main(["plan", "--model", _model_dir(tmp_path, config), "--hardware", "dgx-spark"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert named in err and "not modelled" in err and "supported:" in err


def test_a_gpt_oss_config_plans_sliding_layers_on_even_indices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's gpt_oss.py slides on even layers whatever `layer_types` says: a config
    listing one sliding layer of four plans the same pool as the alternating one."""
    listed = ["sliding_attention"] + ["full_attention"] * 3
    flipped = dict(config_for("gpt-oss"), layer_types=listed)
    plans = []
    for i, config in enumerate((config_for("gpt-oss"), flipped)):
        directory = tmp_path / str(i)
        directory.mkdir()
        args = ["plan", "--model", _model_dir(directory, config), "--hardware", "dgx-spark"]
        assert main([*args, "--json"]) in (0, 1)
        plans.append(json.loads(capsys.readouterr().out)["kv_layout"])
    assert plans[0] == plans[1]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hybrid_override_pattern": "M-M*M"}, "6 characters"),
        ({"hybrid_override_pattern": "M-M*MX"}, "block 'X'"),
        ({"mamba_num_heads": None}, "'mamba_num_heads' is missing"),
        ({"mamba_ssm_cache_dtype": "fp8"}, "'mamba_ssm_cache_dtype'='fp8'"),
    ],
)
def test_a_broken_nemotron_h_config_is_refused_in_one_line(
    change: dict[str, Any], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {k: v for k, v in (config_for("nemotron-h") | change).items() if v is not None}
    assert main(["plan", "--model", _model_dir(tmp_path, config), "--hardware", "dgx-spark"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err


def test_granite_heads_must_cover_the_mixer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """granitemoehybrid.py builds the mixer at mamba_expand × hidden_size, which vLLM's
    MambaMixer2 splits into mamba_n_heads × mamba_d_head."""
    config = config_for("granite-4-h") | {"mamba_d_head": 16}
    assert main(["plan", "--model", _model_dir(tmp_path, config), "--hardware", "dgx-spark"]) == 2
    err = capsys.readouterr().err
    assert "heads × head size = 128" in err and "256" in err, err


def test_the_hybrid_manager_off_is_refused_for_a_gdn_hybrid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM cannot allocate mamba-type state without the hybrid KV cache manager: it
    raises at start-up (0.24: "Hybrid KV cache manager is disabled but failed to convert
    the KV cache specs to one unified type."; 0.32: "Failed to promote local KV cache
    specs to one unified type."), so the planner refuses before anything starts."""
    args = ["plan", "--model", _model_dir(tmp_path, QWEN3_NEXT), "--hardware", "dgx-spark"]
    assert main([*args, "--hybrid-kv-cache-manager", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unified type" in err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"num_experts": 4, "moe_intermediate_size": 32}, "'top_k_experts'"),
        ({"num_kv_shared_layers": 7}, "num_kv_shared_layers=7; must be < num_hidden_layers=7"),
        # gemma4.py looks for the last earlier full layer; layer 0 is the only one here.
        (
            {
                "layer_types": ["full_attention"] + ["sliding_attention"] * 6,
                "num_kv_shared_layers": 6,
            },
            "no earlier sliding_attention",
        ),
        ({"layer_types": ["sliding_attention"] * 6 + ["chunked"]}, "kind 'chunked'"),
    ],
)
def test_a_broken_gemma4_config_is_refused_in_one_line(
    change: dict[str, Any], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_for("gemma4") | change
    assert main(["plan", "--model", _model_dir(tmp_path, config), "--hardware", "dgx-spark"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
