"""vLLM 0.24.0 on one H200 at each model's full context, dummy weights
(fixtures/gpu_h200_gemma/README.md): Gemma 3 27B and Gemma 4 31B through the product's GPU
check, each started with an empty compile cache (cold) and again with the cache kept
(warm); and vLLM's debug split of the profiling run for Llama-3.1-8B, cold then warm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget.components import SAMPLER_COPIES, activation_bytes_per_token
from budget.known_breakage import refusal
from budget.profiles import load_model, load_model_dir
from tests.budget.gpu_runs import (
    HALF_LOGGED_GIB,
    GiB,
    debug_kv_pool,
    observed,
    plan,
    planned_weights,
    profiling_split,
    report,
    tokens_around_the_logged_pool,
)

RUN = Path(__file__).parent / "fixtures" / "gpu_h200_gemma"
PUBLISHED = Path(__file__).parent / "fixtures" / "multimodal"
H100_PROFILING = Path(__file__).parent / "fixtures" / "gpu_h100_families" / "profiling"
# Each model's settings, as the check's command shows them: its full context, 8 sequences.
ARGS = {
    "gemma-3-27b-it": ("--hardware", "h200", "--max-model-len", "131072", "--max-num-seqs", "8"),
    "gemma-4-31b-it": ("--hardware", "h200", "--max-model-len", "262144", "--max-num-seqs", "8"),
}
STARTS = [f"{model}-{cache}" for model in ARGS for cache in ("cold", "warm")]


def model_of(start: str) -> str:
    return start.rsplit("-", 1)[0]


def kv_bytes(start: str) -> int:
    seen = observed(RUN / start)
    assert seen.kv_cache_bytes is not None
    return seen.kv_cache_bytes


@pytest.mark.parametrize("start", STARTS)
def test_each_start_served_the_published_config(start: str) -> None:
    published = {"gemma-3-27b-it": "gemma-3-27b-it.json", "gemma-4-31b-it": "gemma-4-31B-it.json"}
    config = json.loads((RUN / start / "config.json").read_text())
    assert config == json.loads((PUBLISHED / published[model_of(start)]).read_text())


@pytest.mark.parametrize("start", STARTS)
def test_each_start_served_with_its_full_context(start: str) -> None:
    result = report(RUN / start)
    assert result["state"] == "ready" and result["passed"] is True
    command = str(result["command"])
    length = ARGS[model_of(start)][3]
    assert f"--max-model-len {length} --max-num-seqs 8" in command
    assert "--language-model-only" in command and "--load-format dummy" in command


@pytest.mark.parametrize("start", STARTS)
def test_cold_starts_compiled_and_warm_starts_loaded_the_compile_cache(start: str) -> None:
    seen = observed(RUN / start).compile_cache
    assert seen == ("compiled" if start.endswith("cold") else "loaded")


def test_gemma4_ran_on_flashattention_4() -> None:
    """Heterogeneous head sizes (256 sliding, 512 global) put every layer on FA4, whose
    CuTe interface imports quack and cutlass: this start had both (README)."""
    for cache in ("cold", "warm"):
        text = (RUN / f"gemma-4-31b-it-{cache}" / "vllm.log").read_text()
        assert "Using FA4 for all layers" in text and "ModuleNotFoundError" not in text
    installed = dict(
        line.split("==", 1) for line in (RUN / "installed.txt").read_text().splitlines()
    )
    assert installed["quack-kernels"] == "0.3.9" and installed["nvidia-cutlass-dsl"] == "4.5.2"


def test_the_packages_that_served_gemma4_are_not_refused_and_the_first_quack_is() -> None:
    """The entrypoint's pre-flight lets the H200's packages through, and refuses the
    quack-kernels pip chose first (0.3.11), which failed on import (README)."""
    gemma4 = load_model_dir(RUN / "gemma-4-31b-it-cold", read_weights=False).spec
    installed: dict[str, str | None] = dict(
        line.split("==", 1) for line in (RUN / "installed.txt").read_text().splitlines()
    )
    assert refusal(gemma4, installed["vllm"] or "", "9.0", installed) is None
    problem = refusal(gemma4, "0.24.0", "9.0", {**installed, "quack-kernels": "0.3.11"})
    assert problem is not None and "cannot import name 'Arch'" in problem


@pytest.mark.parametrize("start", STARTS)
def test_pool_within_two_percent_and_weights_within_one(
    start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = observed(RUN / start)
    assert seen.weights_bytes is not None
    planned = plan(RUN / start, capsys, *ARGS[model_of(start)])
    assert abs(int(str(planned["kv_cache_bytes"])) / kv_bytes(start) - 1) < 0.02
    assert abs(planned_weights(planned) / seen.weights_bytes - 1) < 0.01


@pytest.mark.parametrize("start", STARTS)
def test_the_logged_pool_brackets_the_logged_tokens(
    start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """At full context too, the page arithmetic turns the logged pool into the logged
    tokens (sliding groups, padding layers, 8 sequences)."""
    seen = observed(RUN / start)
    assert seen.kv_cache_tokens is not None
    low, high = tokens_around_the_logged_pool(RUN / start, capsys, *ARGS[model_of(start)])
    assert low <= seen.kv_cache_tokens <= high


@pytest.mark.parametrize("model", list(ARGS))
def test_the_plan_lies_between_the_cold_and_the_warm_start(
    model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The planner sizes a cold start: a warm start leaves more for KV than planned."""
    planned = int(str(plan(RUN / f"{model}-cold", capsys, *ARGS[model])["kv_cache_bytes"]))
    assert kv_bytes(f"{model}-cold") < planned < kv_bytes(f"{model}-warm")


@pytest.mark.parametrize("model", list(ARGS))
def test_what_a_warm_start_gains_comes_from_the_profiling_peak(model: str) -> None:
    """Same weights and the same CUDA-graph pool cold and warm: the larger pool is what
    the profiling run no longer holds (README's table)."""
    cold, warm = observed(RUN / f"{model}-cold"), observed(RUN / f"{model}-warm")
    assert cold.weights_bytes == warm.weights_bytes
    assert cold.cudagraph_bytes == warm.cudagraph_bytes
    gained = kv_bytes(f"{model}-warm") - kv_bytes(f"{model}-cold")
    assert 1.0 * GiB < gained < 2.0 * GiB


# --- Llama-3.1-8B's profiling run, cold then warm (VLLM_LOGGING_LEVEL=DEBUG) --------------


def test_the_warm_start_ran_the_cold_start_argv() -> None:
    cold = (RUN / "profiling" / "l8_cold.argv").read_text()
    assert cold == (RUN / "profiling" / "l8_warm.argv").read_text()
    assert cold.split() == (H100_PROFILING / "l8_s8_t2048.argv").read_text().split()


def test_a_warm_compile_cache_drops_most_of_the_fixed_peak() -> None:
    """Cold, the H200 logs the H100's split to the digit; warm, the part that does not grow
    with the chunk (docs/kv-arithmetic.md) falls from about one vocab × hidden matrix to
    under a quarter of it, and the pool grows by what the peak lost."""
    llama = load_model("llama-3.1-8b", read_weights=False).spec
    cold = profiling_split(RUN / "profiling" / "l8_cold.debug.log.gz")
    warm = profiling_split(RUN / "profiling" / "l8_warm.debug.log.gz")
    assert cold == profiling_split(H100_PROFILING / "l8_s8_t2048.debug.log.gz")
    assert warm.non_torch_gib == cold.non_torch_gib
    buffers = (
        2048 * activation_bytes_per_token(llama, 1) + 8 * llama.vocab_size * 4 * SAMPLER_COPIES
    )
    matrix = llama.vocab_size * llama.hidden_size * llama.dtype_bytes
    assert abs((cold.torch_peak_gib * GiB - buffers) / matrix - 1) < 0.02
    assert (warm.torch_peak_gib * GiB - buffers) < 0.25 * matrix
    cold_pool, warm_pool = (
        debug_kv_pool(RUN / "profiling" / f"{n}.debug.log.gz") for n in ("l8_cold", "l8_warm")
    )
    lost = (cold.torch_peak_gib - warm.torch_peak_gib) * GiB
    assert abs((warm_pool - cold_pool) - lost) <= 2 * HALF_LOGGED_GIB
