"""vLLM 0.24.0 on one H200 with two public model shapes at dummy weights, vLLM's defaults
and --max-model-len 131072 (fixtures/gpu_h200_families/README.md: configs, flags, the
commands): gpt-oss-120b (MXFP4 experts; sliding-window and full attention alternating)
and NVIDIA-Nemotron-3-Nano-30B-A3B (Mamba-2, attention and MoE layers, bf16). The logs
are read with entrypoint.logscan as they were written; the planner is held to them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from budget.cli import main
from entrypoint.logscan import LogWatcher, Observed

RUN = Path(__file__).parent / "fixtures" / "gpu_h200_families"
GPT_OSS, NEMOTRON = "gpt-oss-120b", "nemotron-3-nano-30b-a3b"
MAX_MODEL_LEN = 131_072  # both starts' --max-model-len
GiB = 1024**3
HALF_LOGGED_GIB = 0.005 * GiB  # gpu_worker.py prints the pool in GiB with two decimals
HALF_LOGGED_CONCURRENCY = 0.005  # kv_cache_utils.py prints the concurrency with "%.2fx"
KV_POOL_TOLERANCE = 0.02


@dataclass(frozen=True)
class Logged:
    """What one start logged, as this file reads it (not through logscan)."""

    tokens: int
    concurrency: float
    pool_gib: float
    weights_gib: float
    prefix_caching: bool


# The figures of each vllm.log, as its README lists them.
LOGGED = {
    GPT_OSS: Logged(1_648_170, 12.57, 60.18, 64.67, prefix_caching=True),
    NEMOTRON: Logged(10_835_937, 82.67, 66.43, 58.92, prefix_caching=False),
}


def log_text(name: str) -> str:
    return (RUN / name / "vllm.log").read_text()


def observed(name: str) -> Observed:
    watcher = LogWatcher()
    for line in log_text(name).splitlines():
        watcher.feed(line)
    return watcher.snapshot()


def plan(name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    argv = ["plan", "--model", str(RUN / name), "--hardware", "h200", "--json"]
    argv += ["--vllm-version", "0.24.0", "--max-model-len", str(MAX_MODEL_LEN), *extra]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", list(LOGGED))
def test_each_kv_line_was_logged_once(name: str) -> None:
    text = log_text(name)
    for line in ("GPU KV cache size: ", "Maximum concurrency for ", "Available KV cache memory: "):
        assert text.count(line) == 1, line


@pytest.mark.parametrize("name", list(LOGGED))
def test_logscan_reads_the_figures_vllm_logged(name: str) -> None:
    seen, want = observed(name), LOGGED[name]
    assert seen.kv_cache_tokens == want.tokens
    assert seen.max_concurrency == want.concurrency
    assert seen.concurrency_model_len == MAX_MODEL_LEN
    assert seen.kv_cache_bytes == round(want.pool_gib * GiB)
    assert seen.weights_bytes == round(want.weights_gib * GiB)


@pytest.mark.parametrize("name", list(LOGGED))
def test_tokens_are_concurrency_times_max_model_len(name: str) -> None:
    """kv_cache_utils.py get_kv_cache_capacity (0.24.0): tokens = int(concurrency ×
    max_model_len), the concurrency printed to two decimals; int() drops under one token."""
    seen = observed(name)
    assert seen.kv_cache_tokens is not None and seen.max_concurrency is not None
    exact = seen.kv_cache_tokens / MAX_MODEL_LEN
    assert abs(exact - seen.max_concurrency) <= HALF_LOGGED_CONCURRENCY + 1 / MAX_MODEL_LEN


@pytest.mark.parametrize("name", list(LOGGED))
def test_prefix_caching_as_vllm_decided(name: str) -> None:
    engine = re.search(r"enable_prefix_caching=(True|False)", log_text(name))
    assert engine, "the engine's config line"
    assert (engine[1] == "True") == LOGGED[name].prefix_caching


def test_nemotron_pads_mamba_to_the_attention_page() -> None:
    seen = observed(NEMOTRON)
    assert seen.block_size == 2096
    assert seen.padding_layers == 1


def test_the_configs_are_the_public_ones() -> None:
    gpt = json.loads((RUN / GPT_OSS / "config.json").read_text())
    assert gpt["architectures"] == ["GptOssForCausalLM"]
    assert gpt["num_hidden_layers"] == len(gpt["layer_types"]) == 36
    assert gpt["max_position_embeddings"] == MAX_MODEL_LEN
    assert gpt["quantization_config"]["quant_method"] == "mxfp4"
    nemotron = json.loads((RUN / NEMOTRON / "config.json").read_text())
    assert nemotron["architectures"] == ["NemotronHForCausalLM"]
    assert len(nemotron["hybrid_override_pattern"]) == nemotron["num_hidden_layers"] == 52


def test_gpt_oss_plan_matches_the_logged_pool(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan(GPT_OSS, capsys)
    if code == 2 and "sliding_attention" in err:
        pytest.skip(f"the planner does not model sliding-window layers yet: {err.strip()}")
    assert code == 0, err
    logged = observed(GPT_OSS)
    assert logged.kv_cache_bytes is not None
    planned = json.loads(out)["kv_cache_bytes"]
    assert abs(planned / logged.kv_cache_bytes - 1) < KV_POOL_TOLERANCE


def test_gpt_oss_tokens_follow_from_the_logged_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """The planner's layout at the logged pool, ± half its last printed digit, brackets
    the logged token count."""
    logged = observed(GPT_OSS)
    assert logged.kv_cache_bytes is not None and logged.kv_cache_tokens is not None
    tokens = []
    for pool in (logged.kv_cache_bytes - HALF_LOGGED_GIB, logged.kv_cache_bytes + HALF_LOGGED_GIB):
        code, out, err = plan(GPT_OSS, capsys, "--kv-cache-memory-bytes", str(int(pool)))
        if code == 2 and "sliding_attention" in err:
            pytest.skip(f"the planner does not model sliding-window layers yet: {err.strip()}")
        assert code == 0, err
        tokens.append(json.loads(out)["kv_cache_tokens"])
    assert tokens[0] <= logged.kv_cache_tokens <= tokens[1]


def test_nemotron_plan_matches_the_logged_pool(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan(NEMOTRON, capsys)
    assert code == 0, err
    planned = json.loads(out)
    logged = observed(NEMOTRON)
    assert logged.kv_cache_bytes is not None
    assert abs(planned["kv_cache_bytes"] / logged.kv_cache_bytes - 1) < KV_POOL_TOLERANCE
    assert planned["block_size"] == logged.block_size
    assert "--no-enable-prefix-caching" in planned["vllm_args"]  # as 0.24 decided for a hybrid


def test_nemotron_tokens_follow_from_the_logged_pool(capsys: pytest.CaptureFixture[str]) -> None:
    logged = observed(NEMOTRON)
    assert logged.kv_cache_bytes is not None and logged.kv_cache_tokens is not None
    tokens = []
    for pool in (logged.kv_cache_bytes - HALF_LOGGED_GIB, logged.kv_cache_bytes + HALF_LOGGED_GIB):
        code, out, err = plan(NEMOTRON, capsys, "--kv-cache-memory-bytes", str(int(pool)))
        assert code == 0, err
        tokens.append(json.loads(out)["kv_cache_tokens"])
    assert tokens[0] <= logged.kv_cache_tokens <= tokens[1]


def test_nemotron_weights_match_the_logged_load(capsys: pytest.CaptureFixture[str]) -> None:
    """The parameter count (no safetensors headers with dummy weights) against "Model
    loading took 58.92 GiB"."""
    code, out, err = plan(NEMOTRON, capsys)
    assert code == 0, err
    weights = sum(v for k, v in json.loads(out)["components"].items() if k.startswith("weights."))
    assert abs(weights / (LOGGED[NEMOTRON].weights_gib * GiB) - 1) < 0.01


@dataclass(frozen=True)
class Mamba2Run:
    """A Mamba-2 hybrid start of the second set (README: "Mamba-2 hybrids with vLLM's
    mamba cache modes"): its folder, flags and what its log says."""

    folder: str
    max_model_len: int
    prefix_caching: bool
    mode: str  # the mamba cache mode vLLM 0.24 takes for these flags
    block: int
    tokens: int
    concurrency: float


MAMBA2_RUNS = (
    Mamba2Run(
        "nemotron-3-nano-30b-a3b-prefix-caching", 131_072, True, "all", 2176, 2_292_685, 17.49
    ),
    Mamba2Run("falcon-h1-shape", 131_072, True, "all", 1792, 1_311_605, 10.01),
    Mamba2Run("nemotron-h-8b-shape", 8192, False, "none", 1040, 4_085_467, 498.71),
)


def mamba2_plan(
    run: Mamba2Run, capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, object]:
    argv = ["plan", "--model", str(RUN / run.folder), "--hardware", "h200", "--json"]
    argv += ["--vllm-version", "0.24.0", "--max-model-len", str(run.max_model_len)]
    argv += ["--prefix-caching", "on" if run.prefix_caching else "off", *extra]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    plan: dict[str, object] = json.loads(out)
    return plan


@pytest.mark.parametrize("run", MAMBA2_RUNS, ids=lambda r: r.folder)
def test_a_mamba2_log_holds_what_its_row_says(run: Mamba2Run) -> None:
    seen = observed(run.folder)
    assert (seen.kv_cache_tokens, seen.max_concurrency) == (run.tokens, run.concurrency)
    assert seen.block_size == run.block
    engine = re.search(r"enable_prefix_caching=(True|False)", log_text(run.folder))
    assert engine and (engine[1] == "True") == run.prefix_caching


@pytest.mark.parametrize("run", MAMBA2_RUNS, ids=lambda r: r.folder)
def test_a_mamba2_plan_has_the_logged_block_mode_and_lines(
    run: Mamba2Run, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = mamba2_plan(run, capsys)
    layout = plan["kv_layout"]
    assert isinstance(layout, dict)
    assert (plan["block_size"], layout["mamba_cache_mode"]) == (run.block, run.mode)
    text = log_text(run.folder)
    for line in layout["log_lines"]:
        assert line in text, line


@pytest.mark.parametrize("run", MAMBA2_RUNS, ids=lambda r: r.folder)
def test_a_mamba2_logged_pool_brackets_its_tokens(
    run: Mamba2Run, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = observed(run.folder)
    assert seen.kv_cache_bytes is not None
    tokens = []
    for pool in (seen.kv_cache_bytes - HALF_LOGGED_GIB, seen.kv_cache_bytes + HALF_LOGGED_GIB):
        plan = mamba2_plan(run, capsys, "--kv-cache-memory-bytes", str(int(pool)))
        tokens.append(plan["kv_cache_tokens"])
    assert tokens[0] <= run.tokens <= tokens[1]  # type: ignore[operator]


@pytest.mark.parametrize("run", MAMBA2_RUNS, ids=lambda r: r.folder)
def test_a_mamba2_plan_is_within_two_percent_of_the_pool_and_one_of_the_weights(
    run: Mamba2Run, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = observed(run.folder)
    assert seen.kv_cache_bytes is not None and seen.weights_bytes is not None
    plan = mamba2_plan(run, capsys)
    assert abs(int(str(plan["kv_cache_bytes"])) / seen.kv_cache_bytes - 1) < KV_POOL_TOLERANCE
    components = plan["components"]
    assert isinstance(components, dict)
    weights = sum(v for k, v in components.items() if k.startswith("weights."))
    assert abs(weights / seen.weights_bytes - 1) < 0.01


def test_vllm_0_24_with_transformers_5_cannot_build_granite_4_h() -> None:
    """transformers 5 renames Granite-4.0-H's layer kinds to "linear_attention" /
    "full_attention" (configuration_utils.py `_LEGACY_LAYER_TYPE_REMAP`); vLLM 0.24's
    granitemoehybrid.py looks them up as "mamba" / "attention" and stops at the first."""
    text = log_text("granite-4.0-h-small-shape")
    assert "KeyError: 'linear_attention'" in text
    assert "GPU KV cache size" not in text
    assert '"mamba"' in (RUN / "granite-4.0-h-small-shape" / "config.json").read_text()
