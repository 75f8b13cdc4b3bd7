"""A tiny Qwen3.5 (dense, text only: `Qwen3_5ForCausalLM`; or, with `write_moe`, the
multimodal Qwen3.5-MoE layout vLLM 0.24.0 serves) with an MTP module and real
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
from transformers import (
    Qwen3_5ForCausalLM,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5TextConfig,
)

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


# Rotary dims of the tiny heads: head_dim 64 × partial_rotary_factor 0.25 = 16, i.e. 8
# frequency pairs, split over (temporal, height, width) as Qwen3.5's [11, 11, 10] splits 32.
MROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
         "mrope_section": [3, 3, 2], "mrope_interleaved": True}  # fmt: skip


def moe_config() -> dict[str, object]:
    """The tiny hybrid-mtp's shapes (experts included) as Qwen3.5-MoE's multimodal
    checkpoint: `Qwen3_5MoeForConditionalGeneration`, the language model under
    `text_config`, a one-block vision tower that is never loaded (vLLM serves the text
    only, `--language-model-only`), in float32."""
    text = {
        k: v
        for k, v in config_for("hybrid-mtp").items()
        if k not in ("architectures", "num_nextn_predict_layers", "rope_theta",
                     "partial_rotary_factor", "norm_topk_prob")
    }  # fmt: skip
    text.update(model_type="qwen3_5_moe_text", mtp_num_hidden_layers=1, torch_dtype="float32",
                rope_parameters=MROPE)  # fmt: skip
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
              "out_hidden_size": text["hidden_size"]}  # fmt: skip
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "text_config": text, "vision_config": vision, "tie_word_embeddings": False,
            "torch_dtype": "float32"}  # fmt: skip


def write_moe(out_dir: Path) -> Path:
    """config.json, tokenizer files and model.safetensors of the Qwen3.5-MoE checkpoint
    (`model.language_model.*`, `lm_head.weight`, `mtp.*`; no vision weights) in `out_dir`."""
    torch.manual_seed(SEED)
    cfg = moe_config()
    write_tiny_model(out_dir, "hybrid-mtp")
    full = Qwen3_5MoeConfig(**{k: v for k, v in cfg.items() if k != "architectures"})
    (out_dir / "config.json").write_text(
        json.dumps(full.to_dict() | {"architectures": cfg["architectures"]}, indent=2)
    )
    text = full.text_config
    save_with_mtp(Qwen3_5MoeForCausalLM(text), text.hidden_size, out_dir, "model.language_model.")
    return out_dir
