"""Mamba-2 hybrids: which layers hold a Mamba-2 mixer, attention or a feed-forward block,
and the mixer's dimensions, read from config.json as vLLM reads them.

Mirrors vllm 0.24.0 and 0.32.0 `model_executor/models/nemotron_h.py` (one block per
`hybrid_override_pattern` character: M Mamba-2, * attention, - MLP, E MoE; ReLU² MLPs and
experts without a gate; latent MoE when `moe_latent_size` is set),
`granitemoehybrid.py` (`layer_types` "mamba" / "attention", each layer with SwiGLU
experts and a shared MLP) and `falcon_h1.py` (every layer runs attention and Mamba-2 in
parallel, then a SwiGLU MLP); the state dtypes of `model_executor/models/config.py`
(`NemotronHForCausalLMConfig`: the SSM state defaults to float32) and
`layers/mamba/mamba_utils.py` (`mamba2_state_dtype`: otherwise the model's dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budget.errors import BudgetError

NEMOTRON_H = "NemotronHForCausalLM"
GRANITE_4_H = "GraniteMoeHybridForCausalLM"
FALCON_H1 = "FalconH1ForCausalLM"
MAMBA2_ARCHITECTURES = (NEMOTRON_H, GRANITE_4_H, FALCON_H1)

# Per-layer mixer kinds (the attention names are budget/model.py's).
MAMBA = "mamba"
PARALLEL = "attention+mamba"  # Falcon-H1: both mixers in one layer
NO_MIXER = "mlp"  # Nemotron-H's "-" and "E" blocks: a feed-forward block only
FULL_ATTENTION = "full_attention"
# Per-layer feed-forward kinds.
DENSE, MOE, NONE = "dense", "moe", "none"
_NEMOTRON_BLOCKS = {
    "M": (MAMBA, NONE),
    "*": (FULL_ATTENTION, NONE),
    "-": (NO_MIXER, DENSE),
    "E": (NO_MIXER, MOE),
}
# granitemoehybrid.py's names (0.24) and the names transformers 5 rewrites them to
# (configuration_utils.py `_LEGACY_LAYER_TYPE_REMAP`), which vllm 0.32 reads.
_GRANITE_MIXERS = {
    "mamba": MAMBA,
    "attention": FULL_ATTENTION,
    "linear_attention": MAMBA,
    "full_attention": FULL_ATTENTION,
}
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# vllm config.py NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE
NEMOTRON_H_DEFAULT_SSM_DTYPE = "float32"


@dataclass(frozen=True)
class Mamba2Spec:
    """One Mamba-2 mixer (all layers share it)."""

    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    intermediate_size: int
    chunk_size: int
    ssm_dtype_bytes: int | None  # None: the model's dtype
    conv_bias: bool
    proj_bias: bool

    @property
    def conv_dim(self) -> int:
        return self.intermediate_size + 2 * self.n_groups * self.state_size


@dataclass(frozen=True)
class Mamba2Layers:
    """A Mamba-2 hybrid's layers: mixer and feed-forward kind of each."""

    mixers: tuple[str, ...]
    ffns: tuple[str, ...]
    spec: Mamba2Spec
    mlp_gated: bool  # SwiGLU (gate + up) or ReLU² (up only)
    shared_expert_intermediate_size: int
    shared_expert_gate: bool  # a sigmoid gate on the shared expert (Qwen's); none here
    expert_hidden_size: int | None  # Nemotron-H latent MoE: experts run at this width


def _int(cfg: dict[str, Any], key: str, source: str, minimum: int = 1) -> int:
    value = cfg.get(key)
    if value is None:
        raise BudgetError(f"{source}: field '{key}' is missing; this model kind needs it")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BudgetError(f"{source}: field '{key}'={value!r}; must be an integer ≥ {minimum}")
    return value


def _chunk_size(cfg: dict[str, Any], source: str) -> int:
    """`ModelConfig.get_mamba_chunk_size`: mamba_chunk_size, else chunk_size, else 2048."""
    for key in ("mamba_chunk_size", "chunk_size"):
        if cfg.get(key) is not None:
            return _int(cfg, key, source)
    return 2048


def _ssm_dtype(cfg: dict[str, Any], architecture: str, source: str) -> int | None:
    if architecture != NEMOTRON_H:
        return None
    name = str(cfg.get("mamba_ssm_cache_dtype") or NEMOTRON_H_DEFAULT_SSM_DTYPE)
    if name not in _DTYPE_BYTES:
        allowed = ", ".join(sorted(_DTYPE_BYTES))
        raise BudgetError(f"{source}: field 'mamba_ssm_cache_dtype'={name!r}; allowed: {allowed}")
    return _DTYPE_BYTES[name]


def _check_heads(spec: Mamba2Spec, source: str) -> Mamba2Spec:
    if spec.num_heads * spec.head_dim != spec.intermediate_size:
        raise BudgetError(
            f"{source}: Mamba-2 heads × head size = {spec.num_heads * spec.head_dim} but the "
            f"mixer's intermediate size is {spec.intermediate_size}; vLLM's mixer needs them equal"
        )
    return spec


def _nemotron_h(cfg: dict[str, Any], num_layers: int, source: str) -> Mamba2Layers:
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != num_layers:
        got = len(pattern) if isinstance(pattern, str) else pattern
        raise BudgetError(
            f"{source}: field 'hybrid_override_pattern' must be a string of "
            f"num_hidden_layers={num_layers} characters; got {got!r}"
        )
    unknown = sorted(set(pattern) - set(_NEMOTRON_BLOCKS))
    if unknown:
        raise BudgetError(
            f"{source}: 'hybrid_override_pattern' has block {unknown[0]!r}; "
            f"supported: {' '.join(_NEMOTRON_BLOCKS)} (Mamba-2, attention, MLP, MoE)"
        )
    if isinstance(cfg.get("intermediate_size"), list):
        raise BudgetError(
            f"{source}: a per-layer list 'intermediate_size' is not modelled by the planner"
        )
    heads = _int(cfg, "mamba_num_heads", source)
    head_dim = _int(cfg, "mamba_head_dim", source)
    spec = Mamba2Spec(
        num_heads=heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "n_groups", source),
        state_size=_int(cfg, "ssm_state_size", source),
        conv_kernel=_int(cfg, "conv_kernel", source),
        intermediate_size=heads * head_dim,
        chunk_size=_chunk_size(cfg, source),
        ssm_dtype_bytes=_ssm_dtype(cfg, NEMOTRON_H, source),
        conv_bias=bool(cfg.get("use_conv_bias", True)),
        proj_bias=bool(cfg.get("use_bias", False)),
    )
    blocks = [_NEMOTRON_BLOCKS[c] for c in pattern]
    shared = int(cfg.get("moe_shared_expert_intermediate_size") or 0)
    latent = cfg.get("moe_latent_size")
    return Mamba2Layers(
        mixers=tuple(b[0] for b in blocks),
        ffns=tuple(b[1] for b in blocks),
        spec=spec,
        mlp_gated=False,
        shared_expert_intermediate_size=shared * int(cfg.get("n_shared_experts") or 0),
        shared_expert_gate=False,
        expert_hidden_size=_int(cfg, "moe_latent_size", source) if latent is not None else None,
    )


def _granite_4_h(cfg: dict[str, Any], num_layers: int, source: str) -> Mamba2Layers:
    kinds = cfg.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != num_layers:
        got = len(kinds) if isinstance(kinds, list) else kinds
        raise BudgetError(
            f"{source}: field 'layer_types' must list num_hidden_layers={num_layers} "
            f"layers; got {got!r}"
        )
    unknown = sorted({str(k) for k in kinds} - set(_GRANITE_MIXERS))
    if unknown:
        raise BudgetError(
            f"{source}: field 'layer_types' has unsupported kind {unknown[0]!r}; "
            f"supported: {', '.join(_GRANITE_MIXERS)}"
        )
    hidden = _int(cfg, "hidden_size", source)
    experts = int(cfg.get("num_local_experts") or 0)
    spec = Mamba2Spec(
        num_heads=_int(cfg, "mamba_n_heads", source),
        head_dim=_int(cfg, "mamba_d_head", source),
        n_groups=_int(cfg, "mamba_n_groups", source),
        state_size=_int(cfg, "mamba_d_state", source),
        conv_kernel=_int(cfg, "mamba_d_conv", source),
        intermediate_size=_int(cfg, "mamba_expand", source) * hidden,
        chunk_size=_chunk_size(cfg, source),
        ssm_dtype_bytes=None,
        conv_bias=bool(cfg.get("mamba_conv_bias", True)),
        proj_bias=bool(cfg.get("mamba_proj_bias", False)),
    )
    return Mamba2Layers(
        mixers=tuple(_GRANITE_MIXERS[str(k)] for k in kinds),
        ffns=(MOE if experts else DENSE,) * num_layers,
        spec=_check_heads(spec, source),
        mlp_gated=True,
        shared_expert_intermediate_size=int(cfg.get("shared_intermediate_size") or 0),
        shared_expert_gate=False,
        expert_hidden_size=None,
    )


def _falcon_h1(cfg: dict[str, Any], num_layers: int, source: str) -> Mamba2Layers:
    hidden = _int(cfg, "hidden_size", source)
    d_ssm = cfg.get("mamba_d_ssm")
    intermediate = (
        _int(cfg, "mamba_d_ssm", source)
        if d_ssm is not None
        else int(_int(cfg, "mamba_expand", source) * hidden)
    )
    spec = Mamba2Spec(
        num_heads=_int(cfg, "mamba_n_heads", source),
        head_dim=_int(cfg, "mamba_d_head", source),
        n_groups=_int(cfg, "mamba_n_groups", source),
        state_size=_int(cfg, "mamba_d_state", source),
        conv_kernel=_int(cfg, "mamba_d_conv", source),
        intermediate_size=intermediate,
        chunk_size=_chunk_size(cfg, source),
        ssm_dtype_bytes=None,
        conv_bias=bool(cfg.get("mamba_conv_bias", True)),
        proj_bias=bool(cfg.get("mamba_proj_bias", False)),
    )
    return Mamba2Layers(
        mixers=(PARALLEL,) * num_layers,
        ffns=(DENSE,) * num_layers,
        spec=_check_heads(spec, source),
        mlp_gated=True,
        shared_expert_intermediate_size=0,
        shared_expert_gate=False,
        expert_hidden_size=None,
    )


_READERS = {NEMOTRON_H: _nemotron_h, GRANITE_4_H: _granite_4_h, FALCON_H1: _falcon_h1}


def mamba2_layers(
    architecture: str, cfg: dict[str, Any], num_layers: int, source: str
) -> Mamba2Layers:
    """The layers of a Mamba-2 hybrid of `MAMBA2_ARCHITECTURES`."""
    return _READERS[architecture](cfg, num_layers, source)
