"""Which model families the planner models; every other one is refused in one line.

A family is a set of vLLM architectures (config.json `architectures[0]`) whose KV
specs, state shapes and weights the planner reproduces.  Config fields of a layer kind
the planner has no arithmetic for (Mamba / SSM mixers, MLA, chunked local attention,
a window on every layer) are refused whatever the architecture says, so a new
architecture name cannot slip an unmodelled layer into a plan.
"""

from __future__ import annotations

from typing import Any

from budget.errors import BudgetError
from budget.mamba2 import MAMBA2_ARCHITECTURES

# vLLM architecture names (model_executor/models/registry.py, vllm 0.32) per family.
FAMILIES: dict[str, tuple[str, ...]] = {
    "dense full attention": (
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
    ),
    "MoE full attention": ("Qwen3MoeForCausalLM",),
    "Gated-DeltaNet hybrids": (
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    ),
    "sliding window + full attention": (
        "GptOssForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma4ForCausalLM",
        # Their language model alone, with --language-model-only (budget/model.py).
        "Gemma3ForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
    ),
    "Mamba-2 hybrids": MAMBA2_ARCHITECTURES,
    "drafters": (
        "EagleLlamaForCausalLM",
        "LlamaForCausalLMEagle",
        "LlamaForCausalLMEagle3",
        "Eagle3LlamaForCausalLM",
        "DFlashDraftModel",
    ),
}
SUPPORTED = frozenset(arch for archs in FAMILIES.values() for arch in archs)
# Architectures whose layers the planner knows it cannot size (vLLM 0.32 registry).
_MAMBA_ARCHITECTURES = (
    "MambaForCausalLM",
    "Mamba2ForCausalLM",
    "FalconMambaForCausalLM",
    "JambaForCausalLM",
    "BambaForCausalLM",
    "Zamba2ForCausalLM",
    "Plamo2ForCausalLM",
    "Lfm2ForCausalLM",
    "MiniMaxText01ForCausalLM",
)
# Config fields of Mamba / SSM mixers (Nemotron-H, Granite-4.0-H, Falcon-H1, Jamba, …).
_MAMBA_FIELDS = (
    "hybrid_override_pattern",
    "layers_block_type",
    "attn_layer_indices",
    "attn_layer_period",
    "mamba_d_state",
    "mamba_n_heads",
    "mamba_d_conv",
    "mamba_expand",
    "mamba_head_dim",
    "ssm_state_size",
    "state_size",
)
# Where `layer_types` may say "linear_attention": the GDN models, and Granite-4.0-H,
# whose "mamba" layers transformers 5 renames so (configuration_utils.py
# `_LEGACY_LAYER_TYPE_REMAP`).
_LINEAR_ATTENTION_ARCHITECTURES = (
    *FAMILIES["Gated-DeltaNet hybrids"],
    "GraniteMoeHybridForCausalLM",
)
# Fields of the Gated-DeltaNet models, whose `mamba_ssm_dtype` is their state's dtype.
_GDN_FIELD = "linear_num_value_heads"


def _refuse(source: str, what: str) -> BudgetError:
    return BudgetError(f"{source}: {what} is not modelled by the planner; supported: {_short()}")


def _short() -> str:
    """The families in a few words (the full list is docs/budget.md's)."""
    return (
        "Llama/Mistral/Qwen2/Qwen3 dense, Qwen3-MoE, Qwen3-Next and Qwen3.5 "
        "(Gated-DeltaNet hybrids), gpt-oss and Gemma 3/4 (sliding window; a multimodal "
        "Gemma as its language model), "
        "Nemotron-H/Nemotron-3, Granite-4.0-H and Falcon-H1 (Mamba-2 hybrids), "
        "EAGLE/EAGLE-3/DFlash drafters"
    )


def _mamba_fields(cfg: dict[str, Any], architecture: str) -> list[str]:
    if _GDN_FIELD in cfg or architecture in MAMBA2_ARCHITECTURES:
        return []
    return [key for key in _MAMBA_FIELDS if cfg.get(key) is not None]


def _gdn_layers(cfg: dict[str, Any]) -> bool:
    """Gated-DeltaNet layers: vLLM builds them only in the Qwen3-Next / Qwen3.5 models."""
    layer_types = cfg.get("layer_types") or ()
    return "full_attention_interval" in cfg or "linear_attention" in layer_types


def _whole_model_window(cfg: dict[str, Any]) -> bool:
    """`sliding_window` with no per-layer kinds: vLLM slides every layer (the attention
    layer falls back to `cache_config.sliding_window`) unless `use_sliding_window` is off."""
    return (
        cfg.get("sliding_window") is not None
        and cfg.get("use_sliding_window") is not False
        and cfg.get("layer_types") is None
    )


def check_family(architecture: str, cfg: dict[str, Any], source: str) -> None:
    """Refuse what the planner cannot size; `cfg` is the language model's config."""
    if architecture in _MAMBA_ARCHITECTURES:
        raise _refuse(source, f"architecture {architecture!r} (Mamba/SSM layers)")
    if mamba := _mamba_fields(cfg, architecture):
        raise _refuse(source, f"a {architecture!r} config with Mamba/SSM fields ({mamba[0]!r})")
    if architecture not in SUPPORTED:
        raise _refuse(source, f"architecture {architecture!r}")
    if _gdn_layers(cfg) and architecture not in _LINEAR_ATTENTION_ARCHITECTURES:
        raise _refuse(source, f"Gated-DeltaNet layers under architecture {architecture!r}")
    if cfg.get("kv_lora_rank") is not None:
        raise _refuse(source, "multi-head latent attention ('kv_lora_rank')")
    if cfg.get("attention_chunk_size") is not None:
        raise _refuse(source, "chunked local attention ('attention_chunk_size')")
    if architecture in MAMBA2_ARCHITECTURES and cfg.get("sliding_window") is not None:
        window = cfg["sliding_window"]
        raise _refuse(source, f"sliding_window={window} beside Mamba-2 layers")
    if architecture in FAMILIES["dense full attention"] and _whole_model_window(cfg):
        window = cfg["sliding_window"]
        raise _refuse(source, f"sliding_window={window} on every layer (no 'layer_types')")
