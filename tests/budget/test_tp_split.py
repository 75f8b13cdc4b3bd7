"""Per-rank sharding at TP 1, 2, 4 and 8, against numbers worked out by hand from vLLM's
formulas (docs/kv-arithmetic.md "Tensor parallelism"), not from the planner:

- KV heads per rank `max(1, num_key_value_heads // tp)`; a TP past the KV heads must be
  a multiple of them (`QKVParallelLinear` replicates each head on tp / kv ranks).
- GDN conv `(conv_dim / tp, conv_kernel - 1 + K)`, ssm `(value_heads / tp, value_dim,
  key_dim)` (`gated_delta_net_state_shape`); the key heads must divide too.
- The hybrid block `16 · cdiv(mamba_page, 16 · attention_page_per_token)`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from budget.errors import BudgetError
from budget.kv import KVModel, KVSettings, kv_layout
from budget.kv_tp import TPHeads
from budget.model import model_from_config
from budget.plan import kv_model
from budget.vllm_rules import choose_rules

ROOT = Path(__file__).resolve().parents[2]
V024 = choose_rules("0.24.0").rules
V032 = choose_rules("0.32.0").rules
# Qwen3-Next-80B-A3B: 12 attention + 36 GDN layers, 16 query / 2 KV heads × 256,
# GDN 16 key / 32 value heads × 128, conv kernel 4, bf16 (conv_dim = 2·128·16 + 128·32
# = 8,192).
QWEN3_NEXT = KVModel(
    12, 36, 2, 256, 256, 2, 16, 32, 128, 128, 4, num_attention_heads=16
)  # fmt: skip


def cuda(tp: int, **changes: object) -> KVSettings:
    base = KVSettings(
        tp=tp, device="cuda", kv_cache_dtype="auto", max_model_len=262_144,
        prefix_caching=False, mtp_k=0, rules=V032,
    )  # fmt: skip
    return replace(base, **changes)


# tp → (KV heads per rank, conv shape, ssm shape, mamba page, block, padding line).
# attention page per token: heads × (256 + 256) × 2 B = 2,048 B (TP 1), 1,024 B after;
# mamba page = conv_dim/tp · 3 · 2 B + 32/tp · 128 · 128 · 2 B; block = 16 · cdiv(page,
# 16 · per_token); padding = (block · per_token − page) / page.
QWEN3_NEXT_BY_TP = {
    1: (2, (8192, 3), (32, 128, 128), 1_097_728, 544, "1.49%"),  # cdiv(33.5) = 34
    2: (1, (4096, 3), (16, 128, 128), 548_864, 544, "1.49%"),  # 33.5 → 34
    4: (1, (2048, 3), (8, 128, 128), 274_432, 272, "1.49%"),  # 16.75 → 17
    8: (1, (1024, 3), (4, 128, 128), 137_216, 144, "7.46%"),  # 8.375 → 9
}


@pytest.mark.parametrize("tp", sorted(QWEN3_NEXT_BY_TP))
def test_qwen3_next_per_rank_shapes_and_block(tp: int) -> None:
    heads, conv, ssm, mamba_page, block, padding = QWEN3_NEXT_BY_TP[tp]
    layout = kv_layout(QWEN3_NEXT, cuda(tp))
    assert layout.kv_heads_per_rank == heads
    assert (layout.conv_state_shape, layout.ssm_state_shape) == (conv, ssm)
    assert layout.mamba_page_bytes == mamba_page
    assert layout.block_size == block
    assert f"Padding mamba page size by {padding}" in layout.log_lines[-1]


def test_tp8_replicates_kv_heads_so_the_block_halves() -> None:
    """Qwen3.6-27B (4 KV heads, GDN 16 key / 48 value heads, fp32 SSM, fp8 KV, MTP 3):
    at TP 4 a rank holds 1 KV head; at TP 8 still 1 (replicated on two ranks) while the
    GDN state halves again. Per token: 1 × 512 × 1 B = 512 B at both. Mamba page:
    TP 4 = 2,560 · 6 · 2 + 12 · 128 · 128 · 4 = 817,152 → 16 · cdiv(817,152, 8,192) = 1,600;
    TP 8 = 1,280 · 6 · 2 + 6 · 128 · 128 · 4 = 408,576 → 16 · cdiv(408,576, 8,192) = 800."""
    header = (ROOT / "tests/budget/fixtures/public/club3090-91_qwen3.6-27b_v0.20.1.log").read_text()
    config = json.loads(header.split("# config: ")[1].splitlines()[0])
    model = kv_model(model_from_config(config, "qwen3.6-27b", "qwen3.6-27b"), 3)
    settings = cuda(4, kv_cache_dtype="fp8_e5m2", prefix_caching=True, mtp_k=3, rules=V024)
    four, eight = kv_layout(model, settings), kv_layout(model, replace(settings, tp=8))
    assert (four.kv_heads_per_rank, eight.kv_heads_per_rank) == (1, 1)
    assert (four.mamba_page_bytes, eight.mamba_page_bytes) == (817_152, 408_576)
    assert (four.block_size, eight.block_size) == (1600, 800)


@pytest.mark.parametrize(
    ("heads", "tp", "message"),
    [
        (TPHeads(2, 16, gdn_key_heads=16, gdn_value_heads=32), 32,
         "num_attention_heads=16 is not divisible by tp=32"),
        (TPHeads(8, 32), 3, "num_attention_heads=32 is not divisible by tp=3"),
        (TPHeads(6, 24), 4, "num_key_value_heads=6 is not divisible by tp=4"),
        (TPHeads(8, 24), 12, "tp=12 is not a multiple of num_key_value_heads=8"),
        (TPHeads(8, 64, kv_heads_replicated=False), 16,
         "num_key_value_heads=8 < tp=16, and this model does not replicate them"),
        (TPHeads(2, 16, gdn_key_heads=4, gdn_value_heads=16), 8,
         "linear_num_key_heads=4 is not divisible by tp=8"),
        (TPHeads(2, 16, gdn_key_heads=16, gdn_value_heads=24), 16,
         "linear_num_value_heads=24 is not divisible by tp=16"),
    ],
)  # fmt: skip
def test_unsupported_splits_are_one_line_errors(heads: TPHeads, tp: int, message: str) -> None:
    with pytest.raises(BudgetError, match=message) as raised:
        heads.require(tp)
    assert "\n" not in str(raised.value)


def test_the_error_lists_the_tp_sizes_that_work() -> None:
    # 16 query / 2 KV heads, GDN 16 / 32: every divisor of 16 splits everything.
    with pytest.raises(BudgetError, match=r"tp ≤ 16 allowed: 1, 2, 4, 8, 16\)$"):
        kv_layout(QWEN3_NEXT, cuda(32))
    # 32 query / 8 KV heads: 3 and 6 split neither.
    assert TPHeads(8, 32).allowed() == [1, 2, 4, 8, 16]


def test_gpt_oss_has_no_kv_head_replication_but_llama_does() -> None:
    """gpt_oss.py gives each rank `num_key_value_heads // tp` heads (0 past 8); the
    other attention modules take max(1, …) and replicate."""
    base = KVModel(36, 0, 8, 64, 64, 2, num_attention_heads=64)
    assert kv_layout(base, cuda(16)).kv_heads_per_rank == 1
    with pytest.raises(BudgetError, match="does not replicate them"):
        kv_layout(replace(base, kv_heads_replicated=False), cuda(16))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama-3.1-8b", "--hardware", "h200", "--tp", "3"],
         "num_attention_heads=32 is not divisible by tp=3"),
        (["--model", "gpt-oss-120b", "--hardware", "h200", "--tp", "16"],
         "num_key_value_heads=8 < tp=16"),
    ],
)  # fmt: skip
def test_cli_refuses_the_split_in_one_line(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "budget", "plan", *args], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
