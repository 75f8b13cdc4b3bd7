"""Sliding-window arithmetic on the published shapes, per vLLM release, on CUDA.

The expected figures are vLLM's formulas written out by hand (docs/kv-arithmetic.md):
`SlidingWindowSpec.max_admission_blocks_per_request` = cdiv(min(W - 1 + in-flight, L),
block) + 1, in-flight = 2 × max_num_batched_tokens with async scheduling (CUDA's default,
0.26+) and one chunk before 0.26; full attention cdiv(L, block); one page per layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main

# openai/gpt-oss-120b config.json (huggingface.co/openai/gpt-oss-120b/blob/main/config.json):
# 36 layers alternating sliding (128) / full, 64 q and 8 KV heads × 64.
GPT_OSS_120B: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "attention_bias": True,
    "tie_word_embeddings": False,
}
# google/gemma-3-1b-it config.json (huggingface.co/google/gemma-3-1b-it): Gemma3ForCausalLM,
# 26 layers, 4 q and 1 KV head × 256, window 512, every sixth layer full.
GEMMA3_1B: dict[str, Any] = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_hidden_layers": 26,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "vocab_size": 262144,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
CUDA_BLOCK = 16
PLAN = ["--hardware", "h200", "--kv-cache-memory-bytes", "10G", "--max-num-batched-tokens", "2048"]


def layout(
    tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, Any]:
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["plan", "--model", str(tmp_path), *PLAN, *extra, "--json"]) in (0, 1)
    result: dict[str, Any] = json.loads(capsys.readouterr().out)["kv_layout"]
    return result


@pytest.mark.parametrize(
    ("version", "sliding_blocks"),
    [
        ("0.24.0", -(-(128 - 1 + 2048) // CUDA_BLOCK) + 1),  # one chunk in flight
        ("0.25.1", -(-(128 - 1 + 2048) // CUDA_BLOCK) + 1),
        ("0.26.0", -(-(128 - 1 + 2 * 2048) // CUDA_BLOCK) + 1),  # two, async scheduling
        ("0.32.0", -(-(128 - 1 + 2 * 2048) // CUDA_BLOCK) + 1),
        ("0.34.0", -(-(128 - 1 + 2 * 2048) // CUDA_BLOCK) + 1),
    ],
)
def test_gpt_oss_120b_blocks_per_request_by_release(
    version: str, sliding_blocks: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = layout(tmp_path, GPT_OSS_120B, capsys, "--vllm-version", version)
    assert got["blocks_per_request"] == 131072 // CUDA_BLOCK + sliding_blocks
    # 18 sliding + 18 full: two groups of 18, a page of 16 tokens × 8 heads × 128 × 2 B.
    assert (got["num_groups"], got["group_size"], got["padding_layers"]) == (2, 18, 0)
    assert got["page_bytes"] == CUDA_BLOCK * 8 * 2 * 64 * 2


def test_the_hybrid_manager_off_keeps_every_token_of_gpt_oss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = layout(tmp_path, GPT_OSS_120B, capsys, "--hybrid-kv-cache-manager", "off")
    assert (got["num_groups"], got["group_size"]) == (1, 36)
    assert got["blocks_per_request"] == 131072 // CUDA_BLOCK


def test_gemma3_1b_groups_pad_and_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Layers 5, 11, 17, 23 full: buckets of 22 sliding and 4 full, groups of 4, the
    sliding bucket in 6 groups with 2 padding layers (2 / 22 = 9.09 %)."""
    got = layout(tmp_path, GEMMA3_1B, capsys, "--vllm-version", "0.32.0")
    assert (got["num_groups"], got["group_size"], got["padding_layers"]) == (7, 4, 2)
    assert got["log_lines"] == ["Add 2 padding layers, may waste at most 9.09% KV cache memory"]
    sliding = -(-(512 - 1 + 2 * 2048) // CUDA_BLOCK) + 1
    assert got["blocks_per_request"] == 32768 // CUDA_BLOCK + 6 * sliding


def test_gemma3_without_a_pattern_takes_transformers_default_of_six(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {k: v for k, v in GEMMA3_1B.items() if k != "sliding_window_pattern"}
    default = layout(tmp_path, config, capsys)
    (tmp_path / "explicit").mkdir()
    assert default == layout(tmp_path / "explicit", GEMMA3_1B, capsys)


def test_a_sliding_model_with_speculative_decoding_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(GPT_OSS_120B))
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    assert main(["plan", "--model", str(tmp_path), *PLAN, "--speculative-config", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sliding-window" in err
