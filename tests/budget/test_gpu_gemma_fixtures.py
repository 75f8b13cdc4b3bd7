"""Google's multimodal Gemma checkpoints on one H100 with vLLM 0.24.0, dummy weights,
started by `python -m entrypoint.gpu_check` with the planner's flags
(fixtures/gpu_h100_gemma/README.md).  Gemma 3 27B served as its language model: the
weights, the padding layers and the token count at the logged pool are the planner's, and
its pool is within 2 % of the plan once the plan counts the profiling run's fixed peak of
one vocabulary matrix (fixtures/gpu_h100_families/profiling).  Gemma 4 31B did not
start: vLLM 0.24 with transformers 5.17 raises AmbiguousGlobalPerLayerAttributeError, which
the planner warns of and the entrypoint refuses before launch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from budget.known_breakage import refusal
from budget.options import PlanOptions
from budget.planner import build_plan
from budget.profiles import load_model_dir
from entrypoint.gpu_check.compare import KV_TOLERANCE, PROFILED_REST, WEIGHTS_TOLERANCE, figures
from tests.budget.gpu_runs import (
    GiB,
    observed,
    plan,
    planned_weights,
    report,
    tokens_around_the_logged_pool,
)

RUN = Path(__file__).parent / "fixtures" / "gpu_h100_gemma"
PUBLISHED = Path(__file__).parent / "fixtures" / "multimodal"
GEMMA3, GEMMA4 = RUN / "gemma-3-27b-it", RUN / "gemma-4-31b-it"
# The start's settings, as its command line shows them (report.json "command").
GEMMA3_ARGS = ("--hardware", "h100-80gb", "--max-model-len", "32768", "--max-num-seqs", "8")


@pytest.mark.parametrize("run", [GEMMA3, GEMMA4], ids=lambda p: p.name)
def test_the_configs_are_the_published_ones(run: Path) -> None:
    published = {GEMMA3: "gemma-3-27b-it.json", GEMMA4: "gemma-4-31B-it.json"}[run]
    assert json.loads((run / "config.json").read_text()) == json.loads(
        (PUBLISHED / published).read_text()
    )


@pytest.mark.parametrize("run", [GEMMA3, GEMMA4], ids=lambda p: p.name)
def test_each_start_had_vllm_skip_the_towers(run: Path) -> None:
    command = str(report(run)["command"])
    assert " --language-model-only " in command
    assert "'language_model_only': True" in (run / "vllm.log").read_text()


def test_gemma_3_served_as_a_text_model_with_the_planned_weights_and_layout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen = observed(GEMMA3)
    assert report(GEMMA3)["state"] == "ready"
    assert (
        "Resolved architecture: Gemma3ForConditionalGeneration" in (GEMMA3 / "vllm.log").read_text()
    )
    planned = plan(GEMMA3, capsys, *GEMMA3_ARGS)
    assert seen.weights_bytes is not None
    assert (
        abs(planned_weights(planned) / seen.weights_bytes - 1) < WEIGHTS_TOLERANCE
    )  # "took 50.74 GiB"
    layout = planned["kv_layout"]
    assert isinstance(layout, dict)
    assert seen.padding_layers == layout["padding_layers"] == 8


def test_gemma_3_tokens_follow_from_the_logged_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The planner's page and group arithmetic at the pool vLLM logged, ± half its last
    printed digit, brackets the 92,374 tokens vLLM logged."""
    assert observed(GEMMA3).kv_cache_tokens == 92_374
    low, high = tokens_around_the_logged_pool(GEMMA3, capsys, *GEMMA3_ARGS)
    assert low <= 92_374 <= high


def test_gemma_3_pool_is_within_two_percent_of_the_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM left 18.96 GiB for KV. The plan counts Gemma 3's 262,208 × 5,376 vocabulary
    matrix in the profiling peak (budget/components.py); without it the plan said 20.94
    GiB, 9.4 % over."""
    seen = observed(GEMMA3)
    pool = plan(GEMMA3, capsys, *GEMMA3_ARGS)["kv_cache_bytes"]
    assert seen.kv_cache_bytes is not None and isinstance(pool, int)
    assert abs(seen.kv_cache_bytes / pool - 1) < KV_TOLERANCE


def test_the_check_puts_the_profiling_peak_where_the_plan_does() -> None:
    """The check's "profiling peak + runtime" row, worked from the log's own lines: the
    H100 profile's 79.19 GiB × 0.92, less the weights (50.74), the pool (18.96) and the
    graph estimate vLLM says it subtracted (0.11). The plan's activation peak and runtime
    come within 0.15 GiB of it (the debug split of the same start: 2.79 GiB torch peak and
    0.24 GiB outside torch)."""
    options = PlanOptions(
        model=str(GEMMA3), hardware="h100-80gb", vllm_version="0.24.0",
        max_model_len=32768, max_num_seqs=8,
    )  # fmt: skip
    planned = build_plan(options, read_weights=False)
    rows = {f.name: f for f in figures(planned, observed(GEMMA3))}
    rest = rows[PROFILED_REST]
    assert rest.observed == pytest.approx((79.19 * 0.92 - 50.74 - 18.96 - 0.11) * GiB, abs=1e3)
    parts = planned.components["activation_peak"] + planned.components["runtime"]
    assert rest.planned == parts
    assert rows["weights"].verdict == "ok" and rest.verdict == "shown"
    assert abs(rest.observed - rest.planned) < 0.15 * GiB


def test_gemma_4_did_not_start_on_vllm_0_24_with_transformers_5_17() -> None:
    text = (GEMMA4 / "vllm.log").read_text()
    assert "AmbiguousGlobalPerLayerAttributeError: 'head_dim' is a per-layer attribute" in text
    assert "get_head_size" in text
    assert report(GEMMA4)["state"] != "ready"
    packages = (RUN / "pip-list.txt").read_text().splitlines()
    assert {"vllm==0.24.0", "transformers==5.17.0"} <= set(packages)


def test_the_entrypoint_refuses_what_failed_there() -> None:
    """The same model, vLLM and transformers: refused before launch, in one line."""
    model = load_model_dir(GEMMA4, read_weights=False).spec
    versions = dict(
        line.split("==") for line in (RUN / "pip-list.txt").read_text().splitlines() if "==" in line
    )
    problem = refusal(model, versions["vllm"], "9.0", {"transformers": versions["transformers"]})
    assert problem is not None and "\n" not in problem
    assert re.search(r"vLLM 0\.24\.0 with transformers 5\.17\.0", problem)
