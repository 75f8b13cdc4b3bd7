"""vLLM 0.24.0 on one H100, dummy weights (fixtures/gpu_h100_families/README.md): a
Granite-4.0-H-Small-shaped start with transformers 5.10.0 through the product's GPU check,
Gemma 4 31B with transformers 5.14.1 (past the config, stopped at CUDA-graph profiling by a
bundle without nvidia-cutlass-dsl), and vLLM's debug split of the profiling run's memory for
Gemma 3 27B and Llama-3.1-8B at two chunk sizes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from budget.components import (
    SAMPLER_COPIES,
    activation_bytes_per_token,
    vocab_matrix_excess_bytes,
)
from budget.known_breakage import refusal, warnings
from budget.model import model_from_config
from budget.profiles import load_model, load_model_dir
from devtools.tiny_model import config_for
from tests.budget.gpu_runs import (
    HALF_LOGGED_GIB,
    GiB,
    Split,
    observed,
    plan,
    planned_weights,
    profiling_split,
    report,
    tokens_around_the_logged_pool,
)

RUN = Path(__file__).parent / "fixtures" / "gpu_h100_families"
GRANITE, GEMMA4 = RUN / "granite-4.0-h-small-shape", RUN / "gemma-4-31b-it"
PUBLISHED_GEMMA4 = Path(__file__).parent / "fixtures" / "multimodal" / "gemma-4-31B-it.json"
GEMMA3_CONFIG = Path(__file__).parent / "fixtures" / "gpu_h100_gemma" / "gemma-3-27b-it"
GRANITE_H200 = Path(__file__).parent / "fixtures" / "gpu_h200_families" / GRANITE.name
# The Granite start's settings, as report.json's command shows them.
GRANITE_ARGS = ("--hardware", "h100-80gb", "--max-model-len", "32768", "--max-num-seqs", "8")


def packages(name: str) -> dict[str, str]:
    lines = (RUN / name).read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line)


# --- Granite-4.0-H-Small shape, transformers 5.10.0 -----------------------------------


def test_granite_is_the_config_that_failed_on_the_h200() -> None:
    assert json.loads((GRANITE / "config.json").read_text()) == json.loads(
        (GRANITE_H200 / "config.json").read_text()
    )


def test_granite_served_with_a_transformers_before_the_rename() -> None:
    """transformers 5.10.0 keeps "mamba" / "attention": vLLM 0.24 built every layer,
    sized the cache and served; the entrypoint only warned, since that pair works."""
    assert report(GRANITE)["state"] == "ready"
    assert packages("pip-list-tf510.txt")["transformers"] == "5.10.0"
    text = (GRANITE / "vllm.log").read_text()
    assert "KeyError" not in text and "GPU KV cache size: 580,266 tokens" in text
    model = load_model_dir(GRANITE, read_weights=False).spec
    assert refusal(model, "0.24.0", "9.0", {"transformers": "5.10.0"}) is None
    entrypoint = (GRANITE / "entrypoint.log").read_text()
    assert any(w in entrypoint for w in warnings(model, "0.24.0", "9.0"))


def test_granite_plan_is_within_two_percent_of_the_pool_and_one_of_the_weights(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen = observed(GRANITE)
    assert seen.kv_cache_bytes is not None and seen.weights_bytes is not None
    planned = plan(GRANITE, capsys, *GRANITE_ARGS)
    assert abs(int(str(planned["kv_cache_bytes"])) / seen.kv_cache_bytes - 1) < 0.02
    assert abs(planned_weights(planned) / seen.weights_bytes - 1) < 0.01


def test_granite_block_and_lines_are_the_logged_ones(capsys: pytest.CaptureFixture[str]) -> None:
    seen = observed(GRANITE)
    planned = plan(GRANITE, capsys, *GRANITE_ARGS)
    layout = planned["kv_layout"]
    assert isinstance(layout, dict)
    assert planned["block_size"] == seen.block_size == 528
    text = (GRANITE / "vllm.log").read_text()
    assert layout["padding_layers"] == 0 and "padding layers" not in text
    for line in layout["log_lines"]:
        assert line in text, line


def test_granite_logged_pool_brackets_its_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert observed(GRANITE).kv_cache_tokens == 580_266
    low, high = tokens_around_the_logged_pool(GRANITE, capsys, *GRANITE_ARGS)
    assert low <= 580_266 <= high


# --- Gemma 4 31B, transformers 5.14.1 ---------------------------------------------------


def test_gemma4_got_past_the_config_with_the_named_transformers() -> None:
    """The warning's way out (transformers 5.14.1) gets vLLM 0.24 past the head_dim read
    that stopped the start with 5.17.0: the model loaded and the profiling run ran."""
    assert json.loads((GEMMA4 / "config.json").read_text()) == json.loads(
        PUBLISHED_GEMMA4.read_text()
    )
    assert packages("pip-list-tf514.txt")["transformers"] == "5.14.1"
    text = (GEMMA4 / "vllm.log").read_text()
    assert "AmbiguousGlobalPerLayerAttributeError" not in text
    assert "Initial profiling/warmup run took" in text
    model = load_model_dir(GEMMA4, read_weights=False).spec
    assert refusal(model, "0.24.0", "9.0", {"transformers": "5.14.1"}) is None


def test_gemma4_weights_are_the_planned_ones(capsys: pytest.CaptureFixture[str]) -> None:
    seen = observed(GEMMA4)
    assert seen.weights_bytes is not None  # "Model loading took 57.91 GiB"
    args = ("--hardware", "h100-80gb", "--max-model-len", "8192", "--max-num-seqs", "8")
    planned = plan(GEMMA4, capsys, *args, "--max-num-batched-tokens", "2048")
    assert abs(planned_weights(planned) / seen.weights_bytes - 1) < 0.01


def test_gemma4_stopped_on_flashattention_4_without_cutlass() -> None:
    """vLLM 0.24 runs all of Gemma 4's layers on FlashAttention 4 (head sizes 256 and
    512), whose CuTe interface imports `cutlass` from nvidia-cutlass-dsl, a requirement
    of the vLLM wheel that the offline bundle left out."""
    text = (GEMMA4 / "vllm.log").read_text()
    assert "Using FA4 for all layers" in text and "Using FlashAttention version 4" in text
    assert "ModuleNotFoundError: No module named 'cutlass'" in text
    assert "profile_cudagraph_memory" in text and "GPU KV cache size" not in text
    assert report(GEMMA4)["state"] != "ready"
    installed = packages("pip-list.txt")
    assert installed["vllm"] == "0.24.0" and "nvidia-cutlass-dsl" not in installed


# --- The profiling run's memory, split (VLLM_LOGGING_LEVEL=DEBUG) ----------------------


def split(name: str) -> Split:
    return profiling_split(RUN / "profiling" / f"{name}.debug.log.gz")


def argv(name: str) -> list[str]:
    return (RUN / "profiling" / f"{name}.argv").read_text().split()


DENSE = {
    "g3": lambda: load_model_dir(GEMMA3_CONFIG, read_weights=False).spec,
    "l8": lambda: load_model("llama-3.1-8b", read_weights=False).spec,
}


@pytest.mark.parametrize("model", list(DENSE))
def test_each_profiling_run_ran_the_chunk_its_argv_names(model: str) -> None:
    for chunk in (2048, 8192):
        words = argv(f"{model}_s8_t{chunk}")
        assert words[words.index("--max-num-batched-tokens") + 1] == str(chunk)
        assert words[words.index("--max-num-seqs") + 1] == "8"


@pytest.mark.parametrize("model", list(DENSE))
def test_the_torch_peak_grows_by_the_planned_bytes_per_token(model: str) -> None:
    """From chunk 2,048 to 8,192 the torch peak grows by what the planner counts per
    prefill token (two hidden-size buffers), within the log's two decimals."""
    spec = DENSE[model]()
    small, large = split(f"{model}_s8_t2048"), split(f"{model}_s8_t8192")
    grew = (large.torch_peak_gib - small.torch_peak_gib) * GiB
    planned = 6144 * activation_bytes_per_token(spec, 1)
    assert abs(grew - planned) <= 2 * HALF_LOGGED_GIB


@pytest.mark.parametrize("model", list(DENSE))
def test_the_fixed_part_of_the_torch_peak_is_one_vocabulary_matrix(model: str) -> None:
    """What does not grow with the chunk: the peak at 2,048 tokens less those tokens'
    buffers and the sampler's logits. In both dense models it is one vocab × hidden
    matrix in bf16 (2.63 GiB for Gemma 3, 0.98 GiB for Llama-3.1-8B) within 2 %: the
    planner's fixed runtime figure (1.3 GiB, calibrated on Llama-8B-sized models) holds
    Llama's and falls 1.6 GiB short of Gemma 3's (docs/kv-arithmetic.md)."""
    spec = DENSE[model]()
    small = split(f"{model}_s8_t2048")
    sampler = 8 * spec.vocab_size * 4 * SAMPLER_COPIES
    fixed = small.torch_peak_gib * GiB - 2048 * activation_bytes_per_token(spec, 1) - sampler
    matrix = spec.vocab_size * spec.hidden_size * spec.dtype_bytes
    assert abs(fixed / matrix - 1) < 0.02
    assert 0.2 <= small.non_torch_gib <= 0.25  # cuBLAS/NCCL-free workspaces, both models


def test_only_dense_models_with_a_larger_vocabulary_matrix_get_the_excess() -> None:
    """Gemma 3's excess is its matrix less Llama-3.1-8B's; per rank under TP; nothing for
    Llama itself, for a smaller vocabulary, or for MoE and hybrid models."""
    gemma3, llama = DENSE["g3"](), DENSE["l8"]()
    llama_matrix = 128_256 * 4096 * 2
    assert vocab_matrix_excess_bytes(gemma3, 1) == 262_208 * 5376 * 2 - llama_matrix
    assert vocab_matrix_excess_bytes(gemma3, 2) == 262_208 * 5376 * 2 // 2 - llama_matrix
    assert vocab_matrix_excess_bytes(llama, 1) == 0
    for kind in ("dense", "moe", "hybrid", "nemotron-h", "gpt-oss"):
        spec = model_from_config(config_for(kind), kind, "test")
        wide = replace(spec, vocab_size=1_000_000, hidden_size=8192)
        assert vocab_matrix_excess_bytes(wide, 1) == (
            1_000_000 * 8192 * spec.dtype_bytes - llama_matrix if kind == "dense" else 0
        ), kind
