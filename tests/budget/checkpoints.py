"""Small real checkpoints for the planner's tests, written with the safetensors library:
Hugging Face models built from the tiny configs (dense, MoE, Qwen3-Next hybrid) and
saved by transformers, sharded with an index or in one file, and an AWQ int4 layout
(qweight/qzeros int32, fp16 scales) written tensor by tensor."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

from devtools.tiny_model import config_for, write_tiny_model

AWQ_GROUP = 32
AWQ_PACK = 8  # int4 values per int32


def write_hf_checkpoint(out_dir: Path, kind: str, max_shard_size: str = "200KB") -> Path:
    """A tiny model of `kind` with random bf16 weights, as `save_pretrained` writes it."""
    write_tiny_model(out_dir, kind)
    config = AutoConfig.from_pretrained(out_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out_dir, max_shard_size=max_shard_size)
    (out_dir / "config.json").write_text(json.dumps(config_for(kind), indent=2))
    return out_dir


def tensor_bytes(directory: Path, name_part: str = "") -> int:
    """numel × element size of every tensor (whose name contains `name_part`), read back
    through safetensors itself."""
    total = 0
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            for name in handle.keys():
                if name_part in name:
                    tensor = handle.get_tensor(name)
                    total += tensor.numel() * tensor.element_size()
    return total


def _awq_linear(prefix: str, in_features: int, out_features: int) -> dict[str, torch.Tensor]:
    groups = in_features // AWQ_GROUP
    return {
        f"{prefix}.qweight": torch.zeros(in_features, out_features // AWQ_PACK, dtype=torch.int32),
        f"{prefix}.qzeros": torch.zeros(groups, out_features // AWQ_PACK, dtype=torch.int32),
        f"{prefix}.scales": torch.ones(groups, out_features, dtype=torch.float16),
    }


def write_awq_checkpoint(out_dir: Path) -> Path:
    """The tiny dense model (Qwen3 shapes) as an AWQ 4-bit checkpoint in one file."""
    write_tiny_model(out_dir, "dense")
    cfg = config_for("dense")
    cfg["quantization_config"] = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": AWQ_GROUP,
        "zero_point": True,
        "version": "gemm",
    }
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    q_out = cfg["num_attention_heads"] * cfg["head_dim"]
    kv_out = cfg["num_key_value_heads"] * cfg["head_dim"]
    tensors: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": torch.zeros(cfg["vocab_size"], hidden, dtype=torch.float16),
        "lm_head.weight": torch.zeros(cfg["vocab_size"], hidden, dtype=torch.float16),
        "model.norm.weight": torch.ones(hidden, dtype=torch.float16),
    }
    for i in range(cfg["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        for name, (fan_in, fan_out) in {
            "self_attn.q_proj": (hidden, q_out),
            "self_attn.k_proj": (hidden, kv_out),
            "self_attn.v_proj": (hidden, kv_out),
            "self_attn.o_proj": (q_out, hidden),
            "mlp.gate_proj": (hidden, inter),
            "mlp.up_proj": (hidden, inter),
            "mlp.down_proj": (inter, hidden),
        }.items():
            tensors.update(_awq_linear(f"{layer}.{name}", fan_in, fan_out))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"{layer}.{norm}.weight"] = torch.ones(hidden, dtype=torch.float16)
        for norm in ("self_attn.q_norm", "self_attn.k_norm"):
            tensors[f"{layer}.{norm}.weight"] = torch.ones(cfg["head_dim"], dtype=torch.float16)
    save_file(tensors, str(out_dir / "model.safetensors"))
    return out_dir
