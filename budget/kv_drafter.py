"""A drafter's KV layers beside a hybrid (GDN) target, mirrored from vLLM 0.32.

`_align_hybrid_block_size` (platforms/interface.py) sizes the block from the target's
attention page alone; a drafter with other KV heads or head size then has a page of
its own.  `unify_kv_cache_spec_page_size` (v1/core/kv_cache_utils.py; 0.33+:
kv_cache_planning.py) makes every page the largest one: an attention layer whose page
divides it gets a block that many times larger, one whose page does not is padded
(non-MLA attention, 0.29+), and the mamba page is padded to it (0.26+, vllm#45207).
`_get_kv_cache_groups_uniform_page_size` then groups target attention, drafter
attention and GDN layers as three buckets.  The drafter's proposer asserts that all
its layers share one group (spec_decode/llm_base_proposer.py
`validate_same_kv_cache_group`).
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.errors import BudgetError

# The planner's rule sets from which vLLM re-pages a drafter beside mamba layers as
# above (read in the 0.30-0.34 sources; 0.26-0.28 pad a page that does not divide the
# largest only where the backend indexes KV by the block stride).
REPAGES_DRAFTER_FROM = (0, 30, 0)


@dataclass(frozen=True)
class DraftKV:
    """The drafter's full-attention KV layers on one rank."""

    layers: int
    per_token_bytes: int  # one layer's K and V per token
    same_spec: bool  # the target's KV heads and head size: it joins the target's bucket


@dataclass(frozen=True)
class UnifiedPages:
    """What `unify_kv_cache_spec_page_size` leaves: one page, a block per attention spec."""

    page_bytes: int  # every layer's page (the mamba page padded to it)
    target_block_size: int  # the target's attention block after unification
    draft_block_size: int


def _block_after_unify(block_size: int, page_bytes: int, max_page_bytes: int) -> int:
    """A page that divides the largest: that many times the block; else padded, same block."""
    if max_page_bytes % page_bytes == 0:
        return block_size * (max_page_bytes // page_bytes)
    return block_size


def unify_pages(
    block_size: int, target_per_token: int, draft: DraftKV, rules_first: tuple[int, int, int]
) -> UnifiedPages:
    """Unify the target's attention page (= the padded mamba page) with the drafter's."""
    target_page = block_size * target_per_token
    draft_page = block_size * draft.per_token_bytes
    if draft_page != target_page and rules_first < REPAGES_DRAFTER_FROM:
        raise BudgetError(
            f"the drafter's KV is {draft.per_token_bytes} B/token per layer, the hybrid "
            f"target's attention {target_per_token}: the planner models how vLLM re-pages "
            "such a drafter beside the GDN state from vLLM 0.30 "
            "(kv_cache_utils.unify_kv_cache_spec_page_size); give --vllm-version 0.30 or "
            "later, or use a drafter with the target's KV heads and head size"
        )
    largest = max(target_page, draft_page)
    return UnifiedPages(
        page_bytes=largest,
        target_block_size=_block_after_unify(block_size, target_page, largest),
        draft_block_size=_block_after_unify(block_size, draft_page, largest),
    )


@dataclass(frozen=True)
class AttentionBuckets:
    """Full-attention layers beside the GDN state: the target's (with a drafter of its
    spec), then a drafter of its own spec; each bucket's block after unification."""

    layers: tuple[int, ...]
    block_sizes: tuple[int, ...]
    page_bytes: int  # the unified page of every layer


def attention_buckets(
    target_layers: int,
    target_per_token: int,
    draft: DraftKV,
    block_size: int,
    rules_first: tuple[int, int, int],
) -> AttentionBuckets:
    """`_get_kv_cache_groups_uniform_page_size` buckets layers by spec: a drafter of the
    target's spec joins its bucket, another is a bucket of its own, re-paged."""
    if draft.layers == 0 or draft.same_spec:
        layers = target_layers + draft.layers
        return AttentionBuckets((layers,), (block_size,), block_size * target_per_token)
    pages = unify_pages(block_size, target_per_token, draft, rules_first)
    return AttentionBuckets(
        (target_layers, draft.layers),
        (pages.target_block_size, pages.draft_block_size),
        pages.page_bytes,
    )


def draft_groups(draft_layers: int, bucket_layers: int, bucket_groups: int) -> int:
    """How many KV cache groups the drafter's layers fall in: its layers are the last
    of its bucket, and `layers[i::num_groups]` puts layer i in group i % num_groups."""
    first = bucket_layers - draft_layers
    return len({(first + i) % bucket_groups for i in range(draft_layers)})


def check_draft_groups(
    draft: DraftKV, bucket_layers: tuple[int, ...], groups: tuple[int, ...], group_size: int
) -> None:
    """vLLM's proposer asserts "All drafting layers should belong to the same kv cache
    group" after sizing the pool: refuse the plan instead.  The drafter's layers end
    the last attention bucket."""
    if not draft.layers:
        return
    last = len(bucket_layers) - 1
    spread = draft_groups(draft.layers, bucket_layers[last], groups[last])
    if spread <= 1:
        return
    raise BudgetError(
        f"the drafter's {draft.layers} KV layers fall in {spread} KV cache groups of "
        f"{group_size} layers beside the hybrid target's, and vLLM refuses to start "
        "(spec_decode/llm_base_proposer.py validate_same_kv_cache_group: 'All drafting "
        "layers should belong to the same kv cache group'); use a drafter whose layers "
        f"fit one KV cache group (here a group holds {group_size} layers)"
    )
