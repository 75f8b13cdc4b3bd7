"""Read a Hugging Face `config.json` (flat or under `text_config`) into a ModelSpec.

Supported: the families of budget/families.py (Llama/Qwen2/Qwen3 dense, Qwen3-MoE,
Qwen3-Next and Qwen3.5 hybrids with their MTP head, gpt-oss and Gemma 3 text with
sliding-window layers, EAGLE/DFlash drafters).  Other architectures, unknown layer
kinds or missing fields are a BudgetError naming them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from budget.context import ContextLimit, context_limit
from budget.errors import BudgetError
from budget.families import check_family
from budget.gemma4 import GEMMA4_ARCHITECTURES, Gemma4Layers, gemma4_layer_types, gemma4_layers
from budget.mamba2 import (
    MAMBA,
    MAMBA2_ARCHITECTURES,
    PARALLEL,
    Mamba2Layers,
    Mamba2Spec,
    mamba2_layers,
)

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"
SLIDING_ATTENTION = "sliding_attention"
# torch dtype names in config.json → bytes per element.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
# Keys whose presence we understand but that change no byte we size.
_SUPPORTED_LAYER_TYPES = {FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION}
# Layers that carry an attention KV cache / a Mamba-2 state (budget/mamba2.py's kinds).
_ATTENTION_KINDS = (FULL_ATTENTION, PARALLEL)
_MAMBA2_KINDS = (MAMBA, PARALLEL)
# vllm 0.32 model_executor/models/gpt_oss.py `_build_attention`: "Only apply sliding
# window to every other layer" — layer i slides iff i is even; config's layer_types unread.
_GPT_OSS = ("GptOssForCausalLM",)
_EVEN_LAYERS_SLIDE = _GPT_OSS
# transformers' Gemma3TextConfig: without layer_types, layer i is full attention iff
# (i + 1) % sliding_window_pattern == 0; the pattern defaults to 6.
_PATTERN_ARCHITECTURES = ("Gemma3ForCausalLM",)
GEMMA3_DEFAULT_PATTERN = 6
# transformers' Gemma3TextConfig defaults (configuration_gemma3.py), which vLLM reads
# through the config object where a checkpoint's config.json leaves a field out, as
# google/gemma-3-27b-it's text_config leaves out the vocabulary, context and tying.
GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "max_position_embeddings": 131_072,
    "tie_word_embeddings": True,
    "sliding_window": 4096,
    "head_dim": 256,
    "num_key_value_heads": 4,
}
# vLLM's multimodal wrappers and the text architecture each builds its language model
# as (gemma3_mm.py / gemma4_mm.py `init_vllm_registered_model(architectures=[…])`;
# qwen3_5.py's wrappers build Qwen3_5Model / Qwen3_5MoeModel, the text models' own).
# The planner sizes the language model alone and has vLLM skip the vision and audio
# towers with --language-model-only (config/multimodal.py: every modality's limit is
# then 0, and `_mark_tower_model` builds and loads no tower). Without it a Qwen3.5
# config with no `vision_config` still gets transformers' default vision tower (27
# blocks of 1,152, about 0.4 B parameters), which vLLM builds and profiles.
LANGUAGE_MODELS_OF: dict[str, str] = {
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
    "Gemma4ForConditionalGeneration": "Gemma4ForCausalLM",
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeForCausalLM",
}


@dataclass(frozen=True)
class GDNSpec:
    """Gated-DeltaNet (linear attention) dimensions, as in Qwen3-Next configs."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel_dim: int
    ssm_dtype_bytes: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


@dataclass(frozen=True)
class MoESpec:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_expert_intermediate_size: int
    sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    # gpt-oss: a bias per expert output (gate_up 2·I, down H) and on the router.
    expert_bias: bool = False
    gated: bool = True  # SwiGLU experts (gate + up); False: ReLU² (Nemotron-H), up only
    shared_expert_gate: bool = True  # Qwen's sigmoid gate on the shared expert
    # Nemotron-H latent MoE: experts run at this width between two replicated projections.
    expert_hidden_size: int | None = None

    def is_moe_layer(self, index: int) -> bool:
        return index not in self.mlp_only_layers and (index + 1) % self.sparse_step == 0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str
    hidden_size: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    tie_word_embeddings: bool
    dtype_bytes: int
    max_position_embeddings: int
    attn_output_gate: bool = False
    gdn: GDNSpec | None = None
    moe: MoESpec | None = None
    mtp_layers: int = 0
    # config.json's draft_vocab_size (`python -m draftvocab`): rows of the MTP drafter's head.
    draft_vocab_size: int | None = None
    assumed: tuple[str, ...] = field(default=(), compare=False)
    # `quantization_config.quant_method` (fp8, modelopt, awq, gptq, auto-round, …); None = none.
    quantization: str | None = None
    quantization_format: str | None = None  # its planner weight format (fp8, nvfp4, int4)
    # The longest max_model_len vLLM accepts (budget/context.py); None = max_position_embeddings.
    context: ContextLimit | None = None
    # Tokens a sliding_attention layer attends to (config.json's sliding_window).
    sliding_window: int | None = None
    attention_bias: bool = False  # q/k/v/o biases (config.json's attention_bias)
    attention_sinks: bool = False  # gpt-oss: one learned sink logit per head and layer
    mamba2: Mamba2Spec | None = None  # Nemotron-H, Granite-4.0-H, Falcon-H1 (budget/mamba2.py)
    # Per layer "dense" | "moe" | "none" where the architecture says so (Nemotron-H);
    # empty: every layer has a feed-forward block, MoE where `moe.is_moe_layer`.
    ffn_kinds: tuple[str, ...] = ()
    mlp_gated: bool = True  # SwiGLU dense MLP; False: ReLU² (Nemotron-H)
    # Gemma 4: full layers' own heads, KV-shared layers, per-layer embeddings (gemma4.py).
    gemma4: Gemma4Layers | None = None

    @property
    def language_model_only(self) -> bool:
        """A multimodal checkpoint served as its language model (LANGUAGE_MODELS_OF)."""
        return self.architecture in LANGUAGE_MODELS_OF

    @property
    def sandwich_norms(self) -> bool:
        """A norm before and after each block (Gemma 3: gemma3.py Gemma3DecoderLayer's
        input / post-attention / pre- and post-feed-forward RMSNorms), else one before."""
        language_model = LANGUAGE_MODELS_OF.get(self.architecture, self.architecture)
        return language_model in _PATTERN_ARCHITECTURES

    @property
    def context_limit(self) -> ContextLimit:
        return self.context or ContextLimit(self.max_position_embeddings, "max_position_embeddings")

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def num_full_attention_layers(self) -> int:
        return sum(self.layer_types.count(kind) for kind in _ATTENTION_KINDS)

    @property
    def num_mamba2_layers(self) -> int:
        return sum(self.layer_types.count(kind) for kind in _MAMBA2_KINDS)

    @property
    def num_sliding_layers(self) -> int:
        return self.layer_types.count(SLIDING_ATTENTION)

    @property
    def own_kv_layer_types(self) -> tuple[str, ...]:
        """The layers with a KV cache of their own: all but Gemma 4's KV-shared ones."""
        shared = self.gemma4.num_kv_shared_layers if self.gemma4 else 0
        return self.layer_types[: self.num_layers - shared]

    @property
    def num_gdn_layers(self) -> int:
        return self.layer_types.count(LINEAR_ATTENTION)

    @property
    def is_hybrid(self) -> bool:
        """Recurrent-state layers beside attention (vLLM's attn_type "hybrid")."""
        return self.num_gdn_layers > 0 or self.num_mamba2_layers > 0


def _need(cfg: dict[str, Any], key: str, source: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise BudgetError(f"{source}: field '{key}' is missing; this model kind needs it")
    return cfg[key]


def _positive_int(cfg: dict[str, Any], key: str, source: str) -> int:
    value = _need(cfg, key, source)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BudgetError(f"{source}: field '{key}'={value!r}; must be a positive integer")
    return value


def _optional_positive_int(cfg: dict[str, Any], key: str, source: str) -> int | None:
    return _positive_int(cfg, key, source) if cfg.get(key) is not None else None


def _dtype_bytes(value: Any, key: str, source: str) -> int:
    if value is None:
        return 2
    name = str(value).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        allowed = ", ".join(sorted(DTYPE_BYTES))
        raise BudgetError(f"{source}: field '{key}'={value!r}; allowed: {allowed}")
    return DTYPE_BYTES[name]


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: `text_config` when present (Qwen3.5), else the top."""
    inner = config.get("text_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in config.items() if k != "text_config"}
        merged.update(inner)
        return merged
    return config


def _layer_types(
    cfg: dict[str, Any], num_layers: int, source: str, architecture: str
) -> tuple[str, ...]:
    if architecture in GEMMA4_ARCHITECTURES:
        return gemma4_layer_types(cfg, num_layers, source)
    if architecture in _EVEN_LAYERS_SLIDE:
        return tuple(SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(num_layers))
    if "layer_types" in cfg and cfg["layer_types"] is not None:
        types = tuple(str(t) for t in cfg["layer_types"])
        if len(types) != num_layers:
            raise BudgetError(
                f"{source}: field 'layer_types' has {len(types)} entries; "
                f"num_hidden_layers={num_layers}"
            )
        unknown = sorted(set(types) - _SUPPORTED_LAYER_TYPES)
        if unknown:
            raise BudgetError(
                f"{source}: field 'layer_types' has unsupported kind {unknown[0]!r}; "
                f"supported: {', '.join(sorted(_SUPPORTED_LAYER_TYPES))}"
            )
        return types
    if architecture in _PATTERN_ARCHITECTURES:
        pattern = _optional_positive_int(cfg, "sliding_window_pattern", source)
        pattern = pattern or GEMMA3_DEFAULT_PATTERN
        return tuple(
            FULL_ATTENTION if (i + 1) % pattern == 0 else SLIDING_ATTENTION
            for i in range(num_layers)
        )
    if "full_attention_interval" in cfg:
        interval = _positive_int(cfg, "full_attention_interval", source)
        return tuple(
            FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION
            for i in range(num_layers)
        )
    return (FULL_ATTENTION,) * num_layers


def _gdn(cfg: dict[str, Any], source: str) -> GDNSpec:
    ssm = cfg.get("mamba_ssm_dtype")
    return GDNSpec(
        num_key_heads=_positive_int(cfg, "linear_num_key_heads", source),
        num_value_heads=_positive_int(cfg, "linear_num_value_heads", source),
        key_head_dim=_positive_int(cfg, "linear_key_head_dim", source),
        value_head_dim=_positive_int(cfg, "linear_value_head_dim", source),
        conv_kernel_dim=_positive_int(cfg, "linear_conv_kernel_dim", source),
        ssm_dtype_bytes=_dtype_bytes(
            ssm if ssm is not None else cfg.get("torch_dtype"), "mamba_ssm_dtype", source
        ),
    )


def _moe(
    cfg: dict[str, Any], source: str, architecture: str, mamba: Mamba2Layers | None = None
) -> MoESpec | None:
    experts = cfg.get("num_experts", cfg.get("num_local_experts", cfg.get("n_routed_experts")))
    if not experts:
        return None
    key = "moe_intermediate_size" if "moe_intermediate_size" in cfg else "intermediate_size"
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    return MoESpec(
        num_experts=int(experts),
        experts_per_token=_positive_int(cfg, "num_experts_per_tok", source),
        expert_intermediate_size=_positive_int(cfg, key, source),
        shared_expert_intermediate_size=mamba.shared_expert_intermediate_size if mamba else shared,
        sparse_step=int(cfg.get("decoder_sparse_step") or 1),
        mlp_only_layers=tuple(int(i) for i in cfg.get("mlp_only_layers") or ()),
        expert_bias=architecture in _GPT_OSS,
        gated=mamba.mlp_gated if mamba else True,
        shared_expert_gate=mamba.shared_expert_gate if mamba else True,
        expert_hidden_size=mamba.expert_hidden_size if mamba else None,
    )


def _gemma4_moe(layers: Gemma4Layers) -> MoESpec | None:
    """Gemma 4's expert block (`num_experts`, `top_k_experts`), beside its dense MLP."""
    if not layers.num_experts:
        return None
    return MoESpec(
        num_experts=layers.num_experts,
        experts_per_token=layers.top_k_experts,
        expert_intermediate_size=layers.expert_intermediate_size,
        shared_expert_intermediate_size=0,
    )


def _dense_intermediate(cfg: dict[str, Any], architecture: str, moe: MoESpec | None) -> int:
    """Granite-4.0-H without experts runs its shared MLP as the dense block."""
    if architecture == "GraniteMoeHybridForCausalLM" and moe is None:
        return int(cfg.get("shared_intermediate_size") or 0)
    return int(cfg.get("intermediate_size") or 0)


def _quantization_config(config: dict[str, Any]) -> dict[str, Any] | None:
    for cfg in (config, config.get("text_config") or {}):
        qc = cfg.get("quantization_config") if isinstance(cfg, dict) else None
        if isinstance(qc, dict):
            return qc
    return None


def quantization_method(config: dict[str, Any]) -> str | None:
    """`quantization_config.quant_method` at the top or under `text_config`."""
    qc = _quantization_config(config)
    if qc is None:
        return None
    return str(qc.get("quant_method") or qc.get("quant_algo") or "unknown").lower()


# quant_method → the planner's weight format, for a directory without safetensors
# (with them, the headers give the bytes); ModelOpt names its algorithm in quant_algo.
_FORMAT_OF_METHOD = {
    "fp8": "fp8",
    "awq": "int4",
    "gptq": "int4",
    "auto-round": "int4",
    "mxfp4": "mxfp4",
}
_FORMAT_OF_MODELOPT_ALGO = {"FP8": "fp8", "NVFP4": "nvfp4"}


def quantization_format(config: dict[str, Any]) -> str | None:
    """The weight format `quantization_config` implies (None: none the planner knows)."""
    qc = _quantization_config(config)
    if qc is None:
        return None
    method = quantization_method(config) or ""
    if method == "modelopt":
        algo = qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo")
        return _FORMAT_OF_MODELOPT_ALGO.get(str(algo).upper())
    if method in ("awq", "gptq", "auto-round") and qc.get("bits", 4) != 4:
        return None
    return _FORMAT_OF_METHOD.get(method)


def model_from_config(
    config: dict[str, Any], name: str, source: str, tokenizer_max_length: int | None = None
) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; `source` names it in errors.
    `tokenizer_max_length`: tokenizer_config.json's model_max_length, which caps the context."""
    cfg = text_config(config)
    archs = config.get("architectures") or cfg.get("architectures") or [cfg.get("model_type")]
    checkpoint_architecture = str(archs[0])
    architecture = LANGUAGE_MODELS_OF.get(checkpoint_architecture, checkpoint_architecture)
    if architecture in _PATTERN_ARCHITECTURES:
        cfg = {**GEMMA3_TEXT_DEFAULTS, **cfg}
    num_layers = _positive_int(cfg, "num_hidden_layers", source)
    hidden = _positive_int(cfg, "hidden_size", source)
    heads = _positive_int(cfg, "num_attention_heads", source)
    check_family(checkpoint_architecture, cfg, source)
    mamba = (
        mamba2_layers(architecture, cfg, num_layers, source)
        if architecture in MAMBA2_ARCHITECTURES
        else None
    )
    layer_types = mamba.mixers if mamba else _layer_types(cfg, num_layers, source, architecture)
    has_gdn = LINEAR_ATTENTION in layer_types
    slides = SLIDING_ATTENTION in layer_types
    vocab = _positive_int(cfg, "vocab_size", source)
    gemma4 = (
        gemma4_layers(cfg, layer_types, vocab, source)
        if architecture in GEMMA4_ARCHITECTURES
        else None
    )
    moe = _gemma4_moe(gemma4) if gemma4 else _moe(cfg, source, architecture, mamba)
    return ModelSpec(
        name=name,
        architecture=checkpoint_architecture,
        hidden_size=hidden,
        layer_types=layer_types,
        num_attention_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        vocab_size=vocab,
        intermediate_size=_dense_intermediate(cfg, architecture, moe),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype_bytes=_dtype_bytes(cfg.get("torch_dtype", cfg.get("dtype")), "torch_dtype", source),
        max_position_embeddings=_positive_int(cfg, "max_position_embeddings", source),
        attn_output_gate=bool(cfg.get("attn_output_gate", has_gdn)),
        gdn=_gdn(cfg, source) if has_gdn else None,
        moe=moe,
        mtp_layers=0
        if mamba
        else int(cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0),
        draft_vocab_size=_optional_positive_int(cfg, "draft_vocab_size", source),
        assumed=tuple(str(a) for a in config.get("_sparkserve_assumed", ())),
        quantization=quantization_method(config),
        quantization_format=quantization_format(config),
        context=context_limit(cfg, tokenizer_max_length),
        sliding_window=_positive_int(cfg, "sliding_window", source) if slides else None,
        attention_bias=bool(cfg.get("attention_bias", False)),
        attention_sinks=architecture in _GPT_OSS,
        mamba2=mamba.spec if mamba else None,
        ffn_kinds=mamba.ffns if mamba else (),
        mlp_gated=mamba.mlp_gated if mamba else True,
        gemma4=gemma4,
    )
