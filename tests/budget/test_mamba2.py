"""Mamba-2 state, page unification and mamba cache modes, against numbers worked out by
hand from vLLM's source (layers/mamba/mamba_utils.py `mamba2_state_shape`,
`extra_groups_for_head_shards`; platforms/interface.py `_align_hybrid_block_size`;
v1/kv_cache_interface.py `MambaSpec.max_memory_usage_bytes`) and against what vLLM
0.24.0 logged for NVIDIA-Nemotron-3-Nano-30B-A3B on an H200
(fixtures/gpu_h200_families/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget.cli import main
from budget.errors import BudgetError
from budget.kv import KVLayout, KVSettings, kv_capacity, kv_layout
from budget.kv_mamba import Mamba2Dims, mamba2_state
from budget.model import model_from_config
from budget.plan import kv_model
from budget.profiles import load_model
from budget.vllm_rules import choose_rules
from budget.weights import layer_params
from devtools.tiny_model import config_for

NEMOTRON_3 = Path(__file__).parent / "fixtures" / "gpu_h200_families" / "nemotron-3-nano-30b-a3b"
# Its config.json: 64 heads of 64, 8 groups, state 128, kernel 4 → I = 4096.
NANO = Mamba2Dims(
    num_heads=64, head_dim=64, n_groups=8, state_size=128, conv_kernel=4,
    intermediate_size=4096, chunk_size=128,
)  # fmt: skip
# ibm-granite/granite-4.0-h-small: 128 heads of 64, one group, state 128, I = 2 × 4096.
GRANITE_SMALL = Mamba2Dims(
    num_heads=128, head_dim=64, n_groups=1, state_size=128, conv_kernel=4,
    intermediate_size=8192, chunk_size=256,
)  # fmt: skip


@pytest.mark.parametrize(
    ("dims", "tp", "conv_channels", "heads"),
    [
        # 8 groups split evenly: conv (I + 2·8·128) / TP
        (NANO, 1, 6144, 64),
        (NANO, 2, 3072, 32),
        (NANO, 4, 1536, 16),
        (NANO, 8, 768, 8),
        # one group is replicated to TP groups: (I + 2·TP·128) / TP
        (GRANITE_SMALL, 1, 8448, 128),
        (GRANITE_SMALL, 2, 4352, 64),
        (GRANITE_SMALL, 4, 2304, 32),
        (GRANITE_SMALL, 8, 1280, 16),
    ],
)
def test_state_shape_per_rank(dims: Mamba2Dims, tp: int, conv_channels: int, heads: int) -> None:
    state = mamba2_state(dims, tp=tp, num_spec_tokens=0, conv_dtype_bytes=2, ssm_dtype_bytes=4)
    assert state.conv_shape == (3, conv_channels)
    assert state.ssm_shape == (heads, 64, 128)
    assert state.page_bytes == 3 * conv_channels * 2 + heads * 64 * 128 * 4


def test_speculative_tokens_widen_the_conv_state() -> None:
    state = mamba2_state(NANO, tp=1, num_spec_tokens=2, conv_dtype_bytes=2, ssm_dtype_bytes=4)
    assert state.conv_shape == (5, 6144)


def test_heads_that_do_not_split_are_refused() -> None:
    with pytest.raises(BudgetError, match="mamba_num_heads=64 is not divisible by tp=3"):
        mamba2_state(NANO, tp=3, num_spec_tokens=0, conv_dtype_bytes=2, ssm_dtype_bytes=4)


def test_groups_that_do_not_split_are_refused_unless_one() -> None:
    """MambaMixer2: `n_groups % tp == 0 or n_groups == 1`; 8 groups at TP 16 are refused
    (the heads, 64, would split), one group at TP 8 is replicated (above)."""
    with pytest.raises(BudgetError, match="n_groups=8 is not divisible by tp=16 and is not 1"):
        mamba2_state(NANO, tp=16, num_spec_tokens=0, conv_dtype_bytes=2, ssm_dtype_bytes=4)


def _nano_layout(release: str, prefix_caching: bool, max_model_len: int = 131_072) -> KVLayout:
    spec = model_from_config(json.loads((NEMOTRON_3 / "config.json").read_text()), "n", "n")
    settings = KVSettings(
        tp=1, device="cuda", kv_cache_dtype="auto", max_model_len=max_model_len,
        prefix_caching=prefix_caching, mtp_k=0, rules=choose_rules(release).rules,
    )  # fmt: skip
    return kv_layout(kv_model(spec, 0), settings)


def test_nemotron_3_nano_layout_as_vllm_0_24_logged_it() -> None:
    """Page 3·6144·2 + 64·64·128·4 = 2,134,016 B; 2 KV heads × 128 × 2 × 2 B = 1,024 B a
    token: 16 · cdiv(2,134,016, 16 · 1,024) = 2,096 tokens, the page padded by 0.58 %;
    23 Mamba-2 layers in groups of 6 attention layers: one padding layer."""
    layout = _nano_layout("0.24.0", prefix_caching=False)
    assert layout.mamba_page_bytes == 2_134_016
    assert layout.block_size == 2096
    assert layout.page_bytes == 2096 * 1024
    assert layout.group_size == 6 and layout.padding_layers == 1
    assert (layout.num_attention_groups, layout.num_mamba_groups) == (1, 4)
    # Prefix caching off: one state block per mamba group, cdiv(131,072, 2,096) = 63 blocks.
    assert layout.blocks_per_request == 63 + 4
    assert any("Padding mamba page size by 0.58%" in line for line in layout.log_lines)
    assert any("Add 1 padding layers" in line for line in layout.log_lines)


@pytest.mark.parametrize("pool_gib", [66.425, 66.435])
def test_the_logged_pool_brackets_the_logged_tokens(pool_gib: float) -> None:
    """vLLM 0.24.0 logged 66.43 GiB, 10,835,937 tokens and 82.67x."""
    layout = _nano_layout("0.24.0", prefix_caching=False)
    capacity = kv_capacity(layout, int(pool_gib * 1024**3), 131_072)
    if pool_gib < 66.43:
        assert capacity.kv_cache_tokens <= 10_835_937
    else:
        assert capacity.kv_cache_tokens >= 10_835_937
    assert f"{capacity.max_concurrency:.2f}" in ("82.66", "82.67")


def test_prefix_caching_on_0_24_uses_mamba_cache_mode_all() -> None:
    """0.24's MambaModelConfig sets mode "all" for a model that SupportsMambaPrefixCaching:
    the block is a multiple of lcm(chunk 128, 16) holding a state, 128 · cdiv(2,084, 128) =
    2,176 tokens, and each mamba group keeps cdiv(131,072, 2,176) = 61 blocks a request."""
    layout = _nano_layout("0.24.0", prefix_caching=True)
    assert layout.mamba_cache_mode == "all"
    assert layout.block_size == 2176
    assert layout.blocks_per_request == 61 + 4 * 61


def test_prefix_caching_on_0_28_uses_align() -> None:
    """0.28 defaults to "align": the 0.24 block, and 2 blocks per mamba group."""
    layout = _nano_layout("0.28.0", prefix_caching=True)
    assert layout.mamba_cache_mode == "align"
    assert layout.block_size == 2096
    assert layout.blocks_per_request == 63 + 4 * 2


def test_granite_and_falcon_ssm_state_keeps_the_model_dtype() -> None:
    """Only NemotronHForCausalLMConfig moves the SSM state to float32 (its default when
    config.json names no mamba_ssm_cache_dtype); the others take the model's bf16."""
    granite = kv_model(model_from_config(config_for("granite-4-h"), "g", "g"), 0)
    nemotron = kv_model(model_from_config(config_for("nemotron-h"), "n", "n"), 0)
    assert (granite.ssm_state_dtype_bytes, nemotron.ssm_state_dtype_bytes) == (2, 4)


def test_the_nemotron_profile_reads_as_the_published_config() -> None:
    """The profile's fields against the public config.json kept in the H200 fixture."""
    from_dir = load_model(str(NEMOTRON_3)).spec
    from_profile = load_model("nemotron-3-nano-30b-a3b").spec
    assert from_profile == type(from_profile)(**{**from_dir.__dict__, "name": from_profile.name})


def test_the_nemotron_profile_fits_one_spark_at_full_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--model", "nemotron-3-nano-30b-a3b", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] and plan["hardware"] == "dgx-spark"
    assert plan["settings"]["max_model_len"] == 262_144
    assert plan["max_concurrency"] >= 1


def test_nemotron_h_blocks_carry_only_their_own_weights() -> None:
    """One block per pattern character (tiny `nemotron-3`: "MEM*EM", hidden 128):
    M holds only the mixer, E only the ReLU² experts (up + down, no gate), * only
    attention; with `moe_latent_size` the experts run at that width between two
    replicated projections (fc1/fc2_latent_proj), counted with the router."""
    spec = model_from_config(config_for("nemotron-3") | {"moe_latent_size": 16}, "n", "n")
    mamba, moe, attention = (layer_params(spec, i, spec.layer_types[i]) for i in (0, 1, 3))
    # in_proj 128 × (2·128 + 2·2·16 + 4) + out_proj 128 × 128, conv 192 × 4 + 192 bias,
    # A, D, dt_bias 3 × 4, the gated norm 128.
    assert mamba.mamba == 128 * 324 + 128 * 128 + 192 * 4 + 192 + 12 + 128
    assert (mamba.attention, mamba.routed_experts, mamba.dense_mlp) == (0, 0, 0)
    assert moe.routed_experts == 4 * 2 * 16 * 32
    assert moe.shared_experts == 2 * 128 * 32
    assert moe.router == 128 * 4 + 2 * 128 * 16
    assert (moe.mamba, moe.attention) == (0, 0)
    assert attention.attention > 0 and attention.routed_experts == attention.mamba == 0
