"""Resident weight bytes per component, per tensor-parallel rank.

Parameter counts follow the layer shapes of the Qwen3 / Qwen3-MoE / Qwen3-Next
modules in vLLM (q/k/v/o, gated q for hybrids, GDN in_proj_qkvz/ba + conv +
out_proj, SwiGLU MLPs, router, shared expert with its gate) and of `MambaMixer2`
(layers/mamba/mamba_mixer2.py: in_proj to z, x, B, C, dt; conv1d; A, D, dt_bias; the
gated norm; out_proj) with the Nemotron-H / Granite-4.0-H / Falcon-H1 blocks around it.
Norm and bias vectors are counted too; they are tiny.
"""

from __future__ import annotations

from dataclasses import dataclass

from budget import gemma4
from budget.errors import BudgetError
from budget.gemma4 import Gemma4Layers, Gemma4Shapes
from budget.mamba2 import DENSE, MAMBA, MOE, NO_MIXER, PARALLEL
from budget.model import FULL_ATTENTION, LINEAR_ATTENTION, ModelSpec, MoESpec

# Bytes per parameter of each weight format, scales included:
#   fp8   — one fp32 scale per 128×128 block (block-wise FP8 checkpoints);
#   nvfp4 — 4-bit values + one fp8 scale per 16 values (+ a global fp32 scale);
#   int4  — AWQ/GPTQ style: 4-bit values + fp16 scale and 4-bit zero per group of 128;
#   mxfp4 — OCP microscaling: 4-bit E2M1 values + one E8M0 (1-byte) scale per 32 values
#           = 4.25 bits (gpt-oss's `*_blocks` / `*_scales` tensors).
FORMAT_BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0 + 4 / (128 * 128),
    "nvfp4": 0.5 + 1 / 16,
    "int4": 0.5 + (2 + 0.5) / 128,
    "mxfp4": 0.5 + 1 / 32,
}
# Formats a checkpoint's quantization_config applies to some components only; the rest
# stay bf16. gpt-oss (huggingface.co/openai/gpt-oss-120b config.json
# `modules_to_not_convert`: self_attn, mlp.router, embed_tokens, lm_head): only the
# experts' weight matrices are MXFP4; their biases are bf16 tensors of their own.
QUANTIZED_COMPONENTS: dict[str, tuple[str, ...]] = {"mxfp4": ("routed_experts",)}
COMPONENTS = (
    "attention",
    "gdn",
    "mamba",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "embeddings",
    "lm_head",
    "norms",
)
# Components kept in bf16 whatever `--weights-dtype` says (as quantised checkpoints do).
ALWAYS_BF16 = ("router", "norms")


def check_format(name: str, what: str) -> str:
    if name not in FORMAT_BYTES_PER_PARAM:
        allowed = ", ".join(FORMAT_BYTES_PER_PARAM)
        raise BudgetError(f"{what}={name!r}; allowed: {allowed}")
    return name


def _attention_params(m: ModelSpec) -> int:
    q_out = m.num_attention_heads * m.head_dim * (2 if m.attn_output_gate else 1)
    kv_out = 2 * m.num_kv_heads * m.head_dim
    o_in = m.num_attention_heads * m.head_dim
    biases = q_out + kv_out + m.hidden_size if m.attention_bias else 0
    sinks = m.num_attention_heads if m.attention_sinks else 0
    weights = m.hidden_size * (q_out + kv_out) + o_in * m.hidden_size
    return weights + biases + sinks + 2 * m.head_dim  # + q/k norms (Qwen3)


def _gdn_params(m: ModelSpec) -> int:
    g = m.gdn
    if g is None:
        return 0
    qkvz = m.hidden_size * (2 * g.key_dim + 2 * g.value_dim)
    ba = m.hidden_size * 2 * g.num_value_heads
    conv = g.conv_dim * g.conv_kernel_dim
    out = g.value_dim * m.hidden_size
    return qkvz + ba + conv + out + 2 * g.num_value_heads + g.value_head_dim


def _mamba2_params(m: ModelSpec) -> int:
    """`MambaMixer2`: in_proj (H → 2I + 2GN + heads), conv1d over I + 2GN channels,
    A, D and dt_bias per head, the gated RMSNorm over I, out_proj (I → H)."""
    s = m.mamba2
    if s is None:
        return 0
    in_out = s.intermediate_size * 2 + 2 * s.n_groups * s.state_size + s.num_heads
    proj = m.hidden_size * in_out + s.intermediate_size * m.hidden_size
    if s.proj_bias:
        proj += in_out + m.hidden_size
    conv = s.conv_dim * s.conv_kernel + (s.conv_dim if s.conv_bias else 0)
    return proj + conv + 3 * s.num_heads + s.intermediate_size


def _mlp_params(hidden: int, intermediate: int, gated: bool = True) -> int:
    """SwiGLU: gate, up and down; ReLU² (gated=False): up and down."""
    return (3 if gated else 2) * hidden * intermediate


def _expert_biases(hidden: int, moe: MoESpec) -> int:
    """gpt-oss's bf16 biases, counted with the (bf16) router: the router's own (E) and
    each expert's gate_up (2·I) and down (H) biases."""
    if not moe.expert_bias:
        return 0
    return moe.num_experts * (1 + 2 * moe.expert_intermediate_size + hidden)


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one decoder layer, split by component."""

    attention: int
    gdn: int
    dense_mlp: int
    routed_experts: int
    shared_experts: int
    router: int
    norms: int
    mamba: int = 0


def _ffn_kind(m: ModelSpec, index: int) -> str:
    if m.ffn_kinds:
        return m.ffn_kinds[index]
    return MOE if m.moe is not None and m.moe.is_moe_layer(index) else DENSE


def _gemma4_layer_params(m: ModelSpec, layers: Gemma4Layers, index: int, kind: str) -> LayerParams:
    """`Gemma4DecoderLayer` (vllm 0.32 model_executor/models/gemma4.py): see budget/gemma4.py."""
    shapes = Gemma4Shapes(
        m.hidden_size, m.num_attention_heads, m.intermediate_size, m.attention_bias, m.num_layers
    )
    shares_kv = index >= len(m.own_kv_layer_types)
    full = kind == FULL_ATTENTION
    heads = layers.full_num_kv_heads if full else m.num_kv_heads
    head_dim = layers.full_head_dim if full else m.head_dim
    experts, router = gemma4.moe_params(shapes, layers)
    return LayerParams(
        attention=gemma4.attention_params(shapes, heads, head_dim, shares_kv),
        gdn=0,
        dense_mlp=gemma4.mlp_params(shapes, layers, shares_kv),
        routed_experts=experts,
        shared_experts=0,
        router=router + gemma4.per_layer_input_params(shapes, layers),
        norms=gemma4.norms_params(shapes, layers),
    )


def layer_params(m: ModelSpec, index: int, kind: str) -> LayerParams:
    if m.gemma4 is not None:
        return _gemma4_layer_params(m, m.gemma4, index, kind)
    moe = m.moe
    ffn = _ffn_kind(m, index)
    routed = shared = router = dense = 0
    if ffn == MOE and moe is not None:
        width = moe.expert_hidden_size or m.hidden_size
        expert = _mlp_params(width, moe.expert_intermediate_size, moe.gated)
        routed = moe.num_experts * expert
        router = m.hidden_size * moe.num_experts + _expert_biases(m.hidden_size, moe)
        if moe.expert_hidden_size:  # fc1/fc2 latent projections, replicated like the router
            router += 2 * m.hidden_size * moe.expert_hidden_size
        if moe.shared_expert_intermediate_size:
            shared = _mlp_params(m.hidden_size, moe.shared_expert_intermediate_size, moe.gated)
            if moe.shared_expert_gate:
                router += m.hidden_size
    elif ffn == DENSE:
        dense = _mlp_params(m.hidden_size, m.intermediate_size, m.mlp_gated)
    attends = kind not in (LINEAR_ATTENTION, MAMBA, NO_MIXER)
    blocks = (kind != NO_MIXER) + (ffn != "none")
    return LayerParams(
        attention=_attention_params(m) if attends else 0,
        gdn=_gdn_params(m) if kind == LINEAR_ATTENTION else 0,
        dense_mlp=dense,
        routed_experts=routed,
        shared_experts=shared,
        router=router,
        norms=blocks * m.hidden_size * (2 if m.sandwich_norms else 1),
        mamba=_mamba2_params(m) if kind in (MAMBA, PARALLEL) else 0,
    )


def main_model_params(m: ModelSpec) -> dict[str, int]:
    """Parameter count of the main model per component (no MTP)."""
    totals = dict.fromkeys(COMPONENTS, 0)
    for index, kind in enumerate(m.layer_types):
        lp = layer_params(m, index, kind)
        for name in (
            "attention",
            "gdn",
            "mamba",
            "dense_mlp",
            "routed_experts",
            "shared_experts",
            "router",
            "norms",
        ):
            totals[name] += getattr(lp, name)
    totals["embeddings"] = m.vocab_size * m.hidden_size
    if m.gemma4 is not None:
        shapes = Gemma4Shapes(
            m.hidden_size, m.num_attention_heads, m.intermediate_size, False, m.num_layers
        )
        totals["embeddings"] += gemma4.embedding_params(shapes, m.gemma4)
    totals["lm_head"] = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size
    totals["norms"] += m.hidden_size
    return totals


def mtp_params(m: ModelSpec) -> int:
    """One MTP module per layer: fc(2h→h), two pre-norms, a full-attention MoE layer.

    Qwen3-Next's MTP shares the main model's embedding and lm_head.
    """
    if m.mtp_layers == 0:
        return 0
    lp = layer_params(m, 0, FULL_ATTENTION)
    per_layer = (
        2 * m.hidden_size * m.hidden_size
        + 3 * m.hidden_size
        + lp.attention
        + lp.dense_mlp
        + lp.routed_experts
        + lp.shared_experts
        + lp.router
        + lp.norms
    )
    return m.mtp_layers * per_layer


def active_params_per_token(m: ModelSpec) -> int:
    """Parameters read per decoded token: everything but the unrouted experts."""
    params = main_model_params(m)
    routed_active = 0
    if m.moe is not None and params["routed_experts"]:
        routed_active = params["routed_experts"] * m.moe.experts_per_token // m.moe.num_experts
    return sum(params.values()) - params["routed_experts"] + routed_active - params["embeddings"]


def sharded(params: int, bytes_per_param: float, tp: int, replicated: bool = False) -> int:
    """Bytes on one rank: column/row-parallel weights split by TP, others replicated."""
    total = params * bytes_per_param
    return int(total if replicated else -(-total // tp))
