"""Sliding-window attention beside full attention (gpt-oss, Gemma 3), as vLLM sizes it.

Mirrors vllm 0.32 (read in 0.20.1 … 0.34.0, docs/kv-arithmetic.md):
`v1/kv_cache_interface.py` `SlidingWindowSpec.max_admission_blocks_per_request`,
`config/vllm.py` `max_in_flight_tokens` / `max_concurrent_batches`,
`v1/core/kv_cache_utils.py` `get_kv_cache_groups` (`unify_hybrid_kv_cache_specs` when
the hybrid KV cache manager is off, `_get_kv_cache_groups_uniform_page_size` when on;
`unify_kv_cache_spec_page_size` first when full and sliding pages differ, Gemma 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.errors import BudgetError
from budget.kv_blocks import group_layers, largest_group_layers, padding_log_lines

# config/vllm.py `max_concurrent_batches`: with async scheduling (the default on CUDA,
# off on CPU in platforms/cpu.py) two batches are in flight; PP without it: pp batches.
ASYNC_SCHEDULING_BATCHES = 2


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def concurrent_batches(*, async_scheduling: bool, pp: int) -> int:
    """`VllmConfig.max_concurrent_batches` of the V1 model runner (PP disables async)."""
    if pp > 1:
        raise BudgetError(
            f"pp={pp} with sliding-window layers: the batches in flight depend on vLLM's "
            "model runner with pipeline parallelism, which the planner does not model"
        )
    return ASYNC_SCHEDULING_BATCHES if async_scheduling else 1


def window_tokens(
    *, sliding_window: int, max_num_batched_tokens: int, batches: int, in_flight_rule: bool
) -> int:
    """Tokens a sliding layer holds per request before the `min` with max_model_len:
    `sliding_window - 1 + max_in_flight_tokens` (0.26+: batches × max_num_batched_tokens;
    before: one max_num_batched_tokens)."""
    if max_num_batched_tokens < 1:
        raise BudgetError(
            f"max_num_batched_tokens={max_num_batched_tokens}; sliding-window layers need ≥ 1"
        )
    in_flight = max_num_batched_tokens * (batches if in_flight_rule else 1)
    return sliding_window - 1 + in_flight


def sliding_blocks_per_request(tokens: int, max_model_len: int, block_size: int) -> int:
    """`max_admission_blocks_per_request`: cdiv(min(tokens, L), block) + 1 (the window
    need not start on a block boundary)."""
    return _cdiv(min(tokens, max_model_len), block_size) + 1


@dataclass(frozen=True)
class UnifiedPages:
    """Each kind's block and the one page every layer gets."""

    sliding_block: int
    full_block: int
    page_bytes: int


def _unified_block(block_size: int, page: int, largest: int) -> int:
    """`unify_kv_cache_spec_page_size`: a page that divides the largest one takes
    `largest / page` times the block; one that does not is padded (block unchanged)."""
    return block_size * (largest // page) if largest % page == 0 else block_size


def unify_pages(block_size: int, sliding_per_token: int, full_per_token: int) -> UnifiedPages:
    """Sliding layers start at the attention block (attention.py `get_kv_cache_spec`:
    `_largest_kernel_block_within` a page budget of per-token × block); then every page
    becomes the largest (kv_cache_utils.py `unify_kv_cache_spec_page_size`)."""
    largest = block_size * max(sliding_per_token, full_per_token)
    return UnifiedPages(
        sliding_block=_unified_block(block_size, block_size * sliding_per_token, largest),
        full_block=_unified_block(block_size, block_size * full_per_token, largest),
        page_bytes=largest,
    )


@dataclass(frozen=True)
class SlidingGroups:
    """How `get_kv_cache_groups` groups the full and sliding layers."""

    num_full_groups: int
    num_sliding_groups: int
    group_size: int
    padding_layers: int
    layers_per_block: int  # layers of the fullest group: bytes_per_block = this × page
    log_lines: tuple[str, ...]


def sliding_groups(full_layers: int, sliding_layers: int, hybrid_manager: bool) -> SlidingGroups:
    """Manager off: every sliding spec becomes full attention, one group of all layers.
    On: one bucket per spec (sliding first: both models start with a sliding layer),
    `group_layers` makes them equal, a bucket of one spec alone is one group."""
    if not hybrid_manager and full_layers:
        layers = full_layers + sliding_layers
        return SlidingGroups(1, 0, layers, 0, layers, ())
    buckets = tuple(n for n in (sliding_layers, full_layers) if n)
    group_size, groups, padding = group_layers(buckets)
    return SlidingGroups(
        num_full_groups=groups[1] if full_layers else 0,
        num_sliding_groups=groups[0],
        group_size=group_size,
        padding_layers=padding,
        layers_per_block=largest_group_layers(buckets, groups),
        log_lines=padding_log_lines(buckets, group_size) if len(buckets) > 1 else (),
    )
