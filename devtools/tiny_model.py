"""Generate tiny model directories that the real vLLM serves with `--load-format dummy`.

Each directory holds an HF `config.json`, a BPE `tokenizer.json` trained on a
built-in corpus, and a `tokenizer_config.json` with a ChatML chat template (the
Qwen layout; entrypoint/gpu_check/tokenizer.py).  vLLM fills the weights with random
values, so the text is gibberish, but every code path (scheduler, KV cache, prefix
caching, metrics) is the real one.

    python -m devtools.tiny_model OUT_DIR [--kind dense|gqa|moe|hybrid|hybrid-mtp|...]

`gpt-oss` and `gemma3` have sliding-window layers beside full attention, in the layout
of openai/gpt-oss-20b (alternating, attention sinks, MoE) and of Gemma 3's text model
(`sliding_window_pattern`: every third layer full here, a window off the block grid).
`gemma4` and `gemma4-padded` are Gemma 4's text model: full layers with heads of their
own, KV-shared last layers, per-layer embeddings.
`nemotron-h`, `nemotron-3`, `granite-4-h` and `falcon-h1` are Mamba-2 hybrids in the
layouts of Nemotron-H (and Nemotron-3's MoE blocks), Granite-4.0-H and Falcon-H1.
`embedding` is a decoder used as an embedder in Qwen/Qwen3-Embedding-0.6B's layout
(`Qwen3ForCausalLM`, tied embeddings, sentence-transformers last-token pooling and
normalisation): vLLM serves it with `--runner pooling` on `/v1/embeddings`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The tokenizer is the product's (python -m entrypoint.gpu_check writes the same one).
from entrypoint.gpu_check.tokenizer import CHAT_TEMPLATE as CHAT_TEMPLATE
from entrypoint.gpu_check.tokenizer import VOCAB_SIZE, write_tokenizer


def _base(max_position: int) -> dict[str, Any]:
    return {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": max_position,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }


def config_for(kind: str, max_position: int = 4096) -> dict[str, Any]:
    """Return the config.json of a tiny model of the given kind."""
    cfg = _base(max_position)
    if kind == "dense":
        cfg.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    elif kind == "embedding":
        cfg.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", tie_word_embeddings=True)
    elif kind == "gqa":
        cfg.update(
            architectures=["LlamaForCausalLM"],
            model_type="llama",
            num_hidden_layers=3,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=32,
            hidden_size=128,
        )  # CPU_ATTN head sizes start at 32
    elif kind == "moe":
        cfg.update(
            architectures=["Qwen3MoeForCausalLM"],
            model_type="qwen3_moe",
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
        )
    elif kind in ("hybrid", "hybrid-mtp"):
        cfg.update(
            architectures=["Qwen3NextForCausalLM"],
            model_type="qwen3_next",
            hidden_size=128,
            num_hidden_layers=4,
            full_attention_interval=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
            partial_rotary_factor=0.25,
        )
        if kind == "hybrid-mtp":
            cfg["num_nextn_predict_layers"] = 1
    elif kind in _SLIDING_KINDS:
        cfg.update(_SLIDING_KINDS[kind])
    elif kind in _MAMBA2_KINDS:
        cfg.update(_MAMBA2_KINDS[kind])
    elif kind == "gemma3-mm":
        return _multimodal_gemma3(config_for("gemma3", max_position))
    else:
        raise ValueError(f"kind={kind!r}; must be one of {', '.join(KINDS)}")
    return cfg


# config.json fields of openai/gpt-oss-20b's layout, shrunk: `layer_types` alternate from
# a sliding layer (vLLM's gpt_oss.py slides on even layers), yarn rope, biased attention.
_GPT_OSS = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 128,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "attention_bias": True,
    "swiglu_limit": 7.0,
    "rope_theta": 150000.0,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 2.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 4096,
    },
}
# Gemma 3's text model (`Gemma3ForCausalLM`), shrunk: no `layer_types`, so transformers
# derives them from `sliding_window_pattern` (layer i is full iff (i+1) % pattern == 0).
_GEMMA3 = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 128,
    "num_hidden_layers": 7,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "sliding_window": 200,
    "sliding_window_pattern": 3,
    "query_pre_attn_scalar": 64,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_local_base_freq": 10000.0,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
# Gemma 4's text model (`Gemma4ForCausalLM`, transformers' Gemma4TextConfig), shrunk:
# full layers of their own heads (`global_head_dim`; `attention_k_eq_v` gives them
# `num_global_key_value_heads`), the last `num_kv_shared_layers` reading an earlier
# layer's cache, per-layer embeddings.  Per token a full layer holds 2 × 2 × 128 × 2 B,
# twice a sliding layer's 2 × 2 × 64 × 2 B, so vLLM doubles the sliding block.
_GEMMA4 = {
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "hidden_size": 128,
    "num_hidden_layers": 7,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "global_head_dim": 128,
    "num_global_key_value_heads": 2,
    "attention_k_eq_v": True,
    "num_kv_shared_layers": 2,
    "layer_types": [
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "full_attention",
    ],
    "sliding_window": 200,
    "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": VOCAB_SIZE,
    "hidden_activation": "gelu_pytorch_tanh",
    "final_logit_softcapping": 30.0,
    "tie_word_embeddings": True,
}
# The same with a full-layer page no multiple of the sliding one (2 × 96 against
# 2 × 64 per token): vLLM pads the sliding page to the full one instead.
_GEMMA4_PADDED = dict(_GEMMA4, global_head_dim=96, attention_k_eq_v=False)
# google/gemma-3-4b-it's multimodal layout (`Gemma3ForConditionalGeneration`: the text
# model under `text_config`, a SigLIP tower under `vision_config`), shrunk.
_SIGLIP = {
    "model_type": "siglip_vision_model",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "image_size": 224,
    "patch_size": 14,
    "vision_use_head": False,
}


def _multimodal_gemma3(text: dict[str, Any]) -> dict[str, Any]:
    inner = {k: v for k, v in text.items() if k not in ("architectures", "torch_dtype")}
    return {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": inner,
        "vision_config": _SIGLIP,
        "mm_tokens_per_image": 16,
        "boi_token_index": VOCAB_SIZE - 3,
        "eoi_token_index": VOCAB_SIZE - 2,
        "image_token_index": VOCAB_SIZE - 1,
        "torch_dtype": text["torch_dtype"],
        "tie_word_embeddings": True,
    }


_SLIDING_KINDS: dict[str, dict[str, Any]] = {
    "gpt-oss": _GPT_OSS,
    "gemma3": _GEMMA3,
    "gemma4": _GEMMA4,
    "gemma4-padded": _GEMMA4_PADDED,
}

# Mamba-2 hybrids, shrunk from their public config.json layouts.  Nemotron-H
# (nvidia/Nemotron-H-8B-Base-8K: one block per `hybrid_override_pattern` character,
# M Mamba-2, * attention, - ReLU² MLP); `nemotron-3` adds NVIDIA-Nemotron-3-Nano's E
# (ReLU² MoE) blocks.
_NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 128,
    "num_hidden_layers": 6,
    "hybrid_override_pattern": "M-M*M-",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "attention_bias": False,
    "mamba_num_heads": 4,
    "mamba_head_dim": 32,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "chunk_size": 128,
    "expand": 2,
    "use_conv_bias": True,
    "use_bias": False,
    "mamba_hidden_act": "silu",
    "intermediate_size": 64,
    "mlp_hidden_act": "relu2",
    "mlp_bias": False,
    "layer_norm_epsilon": 1e-5,
    "residual_in_fp32": False,
    "rescale_prenorm_residual": True,
}
_NEMOTRON_3 = {
    **_NEMOTRON_H,
    "hybrid_override_pattern": "MEM*EM",
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 32,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
}
# ibm-granite/granite-4.0-h-tiny's layout: `layer_types` of Mamba-2 and attention
# layers, each with SwiGLU experts and a shared MLP, no positional embedding.
_GRANITE_4_H = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["mamba", "mamba", "attention", "mamba"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "attention_bias": False,
    "position_embedding_type": "nope",
    "mamba_n_heads": 8,
    "mamba_d_head": 32,
    "mamba_n_groups": 1,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 256,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 32,
    "shared_intermediate_size": 64,
    "rms_norm_eps": 1e-5,
    "embedding_multiplier": 12.0,
    "logits_scaling": 4.0,
    "residual_multiplier": 0.22,
    "attention_multiplier": 0.0078125,
    "tie_word_embeddings": True,
}
# tiiuae/Falcon-H1's layout: attention and Mamba-2 side by side in every layer.
_FALCON_H1 = {
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "hidden_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 128,
    "mlp_bias": False,
    "attention_bias": False,
    "mamba_d_ssm": 256,
    "mamba_n_heads": 8,
    "mamba_d_head": 32,
    "mamba_n_groups": 1,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 128,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "mamba_norm_before_gate": False,
    "mamba_rms_norm": False,
    "projectors_bias": False,
    "rms_norm_eps": 1e-5,
}
_MAMBA2_KINDS: dict[str, dict[str, Any]] = {
    "nemotron-h": _NEMOTRON_H,
    "nemotron-3": _NEMOTRON_3,
    "granite-4-h": _GRANITE_4_H,
    "falcon-h1": _FALCON_H1,
}

KINDS = (
    "dense",
    "gqa",
    "moe",
    "hybrid",
    "hybrid-mtp",
    *_SLIDING_KINDS,
    *_MAMBA2_KINDS,
    "embedding",
    "gemma3-mm",
)

# Qwen/Qwen3-Embedding-0.6B's sentence-transformers files: vLLM reads the pooling and the
# normalisation from them (transformers_utils/config.py `get_pooling_config`, 0.32.0).
_ST_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {
        "idx": 2,
        "name": "2",
        "path": "2_Normalize",
        "type": "sentence_transformers.models.Normalize",
    },
]
_ST_POOLING = {
    "pooling_mode_cls_token": False,
    "pooling_mode_mean_tokens": False,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
    "pooling_mode_weightedmean_tokens": False,
    "pooling_mode_lasttoken": True,
    "include_prompt": True,
}

# How the tests' shared vLLM and the CPU benchmarks serve the tiny model: small batches
# and a 256 MB KV pool that start quickly on a 2-core machine, eager (no compile).
TINY_SERVE_ARGS = (
    "--served-model-name",
    "tiny",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "8",
    "--max-num-batched-tokens",
    "512",
    "--kv-cache-memory-bytes",
    "256M",
    "--enforce-eager",
)


def write_tiny_model(out_dir: Path, kind: str = "dense", max_position: int = 4096) -> Path:
    """Write config.json and the tokenizer files into out_dir; return out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = config_for(kind, max_position)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    if kind == "embedding":
        _write_sentence_transformers(out_dir, int(config["hidden_size"]))
    write_tokenizer(out_dir)
    (out_dir / "generation_config.json").write_text(
        json.dumps({"eos_token_id": 2, "pad_token_id": 0, "do_sample": False})
    )
    return out_dir


def _write_sentence_transformers(out_dir: Path, hidden_size: int) -> None:
    (out_dir / "modules.json").write_text(json.dumps(_ST_MODULES, indent=2))
    pooling = {"word_embedding_dimension": hidden_size, **_ST_POOLING}
    (out_dir / "1_Pooling").mkdir(exist_ok=True)
    (out_dir / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--kind", choices=KINDS, default="dense")
    parser.add_argument("--max-position", type=int, default=4096)
    args = parser.parse_args(argv)
    print(write_tiny_model(args.out_dir, args.kind, args.max_position))
    return 0


if __name__ == "__main__":
    sys.exit(main())
