"""A tiny Qwen3.5 (dense, text only: `Qwen3_5ForCausalLM`) with an MTP module and real
random float32 weights (safetensors), the tiny model's tokenizer beside it. Built the way
tests/draftvocab/tiny_mtp.py builds its Qwen3-Next, for the same reason: embeddings that
dominate the residual stream and an MTP `fc` that passes the next token's embedding
through, so that drafts would mostly be accepted.

Qwen3.5 names its MTP depth `mtp_num_hidden_layers` (Qwen3-Next: `num_nextn_predict_layers`)
and checkpoints its gated-delta-net projections unfused (`in_proj_qkv`, `in_proj_z`,
`in_proj_b`, `in_proj_a`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

from devtools.tiny_model import config_for, write_tiny_model
from tests.draftvocab.tiny_mtp import SEED, save_with_mtp


def config() -> dict[str, object]:
    """The tiny hybrid's shapes as a dense Qwen3.5 text model, in float32."""
    cfg = {
        k: v
        for k, v in config_for("hybrid").items()
        if not k.startswith(("num_experts", "moe_", "shared_expert", "decoder_sparse", "mlp_only"))
        and k != "norm_topk_prob"
    }
    cfg.update(
        architectures=["Qwen3_5ForCausalLM"],
        model_type="qwen3_5_text",
        intermediate_size=256,
        mtp_num_hidden_layers=1,
        torch_dtype="float32",
    )
    return cfg


def write(out_dir: Path) -> Path:
    """config.json, tokenizer files and model.safetensors in `out_dir`; returns it."""
    torch.manual_seed(SEED)
    cfg = config()
    write_tiny_model(out_dir, "hybrid")
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    hf_config = Qwen3_5TextConfig(**{k: v for k, v in cfg.items() if k != "architectures"})
    save_with_mtp(Qwen3_5ForCausalLM(hf_config), hf_config.hidden_size, out_dir)
    return out_dir
