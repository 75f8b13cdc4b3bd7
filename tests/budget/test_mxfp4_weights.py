"""gpt-oss's MXFP4 experts: exact from safetensors headers; from the parameter count
without them, with the assumption named.

Expected figures come from the MXFP4 definition (OCP microscaling: 32 E2M1 values of
4 bits share one 8-bit E8M0 scale, 4.25 bits a value) and from OpenAI's gpt-oss model
card (arXiv 2508.10925, table 1: 116.83 B parameters for gpt-oss-120b, 20.91 B for
gpt-oss-20b), not from the planner.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from budget.cli import main
from devtools.tiny_model import config_for, write_tiny_model
from tests.budget.checkpoints import tensor_bytes

MXFP4_BLOCK = 32  # values per E8M0 scale
# huggingface.co/openai/gpt-oss-120b/blob/main/config.json (gpt-oss-20b: 24 layers, 32
# experts); quantization_config as published.
GPT_OSS: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "attention_bias": True,
    "head_dim": 64,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "max_position_embeddings": 131072,
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "num_local_experts": 128,
    "sliding_window": 128,
    "tie_word_embeddings": False,
    "vocab_size": 201088,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
}


def plan(directory: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(
        ["plan", "--model", str(directory), "--hardware", "dgx-spark", *extra, "--json"]
    ) in (0, 1)
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def write_config(directory: Path, config: dict[str, Any]) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.mark.parametrize(
    ("layers", "experts", "published_billions"), [(36, 128, 116.83), (24, 32, 20.91)]
)
def test_without_headers_gpt_oss_weighs_its_published_parameters_at_mxfp4(
    layers: int,
    experts: int,
    published_billions: float,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = dict(GPT_OSS, num_hidden_layers=layers, num_local_experts=experts)
    result = plan(write_config(tmp_path, config), capsys)
    expert_params = layers * experts * 3 * 2880 * 2880  # gate, up, down per expert
    mxfp4_bytes = expert_params // 2 + expert_params // MXFP4_BLOCK
    assert result["components"]["weights.routed_experts"] == mxfp4_bytes
    assert result["components"]["weights.embeddings"] == 201088 * 2880 * 2  # bf16
    formats = result["settings"]["weight_formats"]
    assert formats["routed_experts"] == "mxfp4" and formats["attention"] == "bf16"
    note = result["estimates"]["weights.routed_experts"]
    assert "4.25 bits" in note and "E8M0" in note and "bf16" in note
    bf16 = sum(v for k, v in result["components"].items() if k.startswith("weights.")) - mxfp4_bytes
    params = expert_params + bf16 // 2
    assert round(params / 1e9, 2) == published_billions


def _gpt_oss_mxfp4_checkpoint(directory: Path) -> Path:
    """The tiny gpt-oss kind in the published tensor layout: uint8 `*_blocks` (two values
    a byte, 16 bytes per 32-value block) and `*_scales`, bf16 biases, bf16 elsewhere."""
    cfg = config_for("gpt-oss")
    write_tiny_model(directory, "gpt-oss")
    (directory / "config.json").write_text(
        json.dumps(dict(cfg, quantization_config=GPT_OSS["quantization_config"]))
    )
    hidden, inter, experts, heads = 128, 64, 4, 4
    kv = 2 * 64
    tensors: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": torch.zeros(1024, hidden, dtype=torch.bfloat16),
        "lm_head.weight": torch.zeros(1024, hidden, dtype=torch.bfloat16),
        "model.norm.weight": torch.zeros(hidden, dtype=torch.bfloat16),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        tensors |= {
            f"{p}.input_layernorm.weight": torch.zeros(hidden, dtype=torch.bfloat16),
            f"{p}.post_attention_layernorm.weight": torch.zeros(hidden, dtype=torch.bfloat16),
            f"{p}.self_attn.q_proj.weight": torch.zeros(heads * 64, hidden, dtype=torch.bfloat16),
            f"{p}.self_attn.k_proj.weight": torch.zeros(kv, hidden, dtype=torch.bfloat16),
            f"{p}.self_attn.v_proj.weight": torch.zeros(kv, hidden, dtype=torch.bfloat16),
            f"{p}.self_attn.o_proj.weight": torch.zeros(hidden, heads * 64, dtype=torch.bfloat16),
            f"{p}.self_attn.sinks": torch.zeros(heads, dtype=torch.bfloat16),
            f"{p}.mlp.router.weight": torch.zeros(experts, hidden, dtype=torch.bfloat16),
            f"{p}.mlp.router.bias": torch.zeros(experts, dtype=torch.bfloat16),
            f"{p}.mlp.experts.gate_up_proj_blocks": torch.zeros(
                experts, 2 * inter, hidden // MXFP4_BLOCK, 16, dtype=torch.uint8
            ),
            f"{p}.mlp.experts.gate_up_proj_scales": torch.zeros(
                experts, 2 * inter, hidden // MXFP4_BLOCK, dtype=torch.uint8
            ),
            f"{p}.mlp.experts.gate_up_proj_bias": torch.zeros(
                experts, 2 * inter, dtype=torch.bfloat16
            ),
            f"{p}.mlp.experts.down_proj_blocks": torch.zeros(
                experts, hidden, inter // MXFP4_BLOCK, 16, dtype=torch.uint8
            ),
            f"{p}.mlp.experts.down_proj_scales": torch.zeros(
                experts, hidden, inter // MXFP4_BLOCK, dtype=torch.uint8
            ),
            f"{p}.mlp.experts.down_proj_bias": torch.zeros(experts, hidden, dtype=torch.bfloat16),
        }
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def test_with_headers_the_mxfp4_bytes_are_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _gpt_oss_mxfp4_checkpoint(tmp_path / "ckpt")
    components = plan(directory, capsys)["components"]
    assert components["weights.routed_experts"] == tensor_bytes(directory, ".experts.")
    assert components["weights.router"] == tensor_bytes(directory, ".mlp.router.")
    assert components["weights.attention"] == tensor_bytes(directory, ".self_attn.")
    weights = sum(v for k, v in components.items() if k.startswith("weights."))
    assert weights == tensor_bytes(directory)
