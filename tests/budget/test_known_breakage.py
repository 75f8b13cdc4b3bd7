"""Starts a vLLM release cannot make with some versions of another package: the planner
warns, the entrypoint refuses where the installed versions are ones that fail
(budget/known_breakage.py).

- Gemma 4 on a vLLM before 0.28.0 with transformers 5.15 or later (vllm-project/vllm#51744).
- Granite-4.0-H on a vLLM before 0.26.0 with transformers 5.13 or later
  (vllm-project/vllm#47634); the H200 start of `fixtures/gpu_h200_families/` failed so.
- Gemma 4 on a vLLM before 0.28.0 with quack-kernels 0.3.10 to 0.4.0
  (vllm-project/vllm#47570); `fixtures/gpu_h200_gemma/` served it with 0.3.9.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget.cli import main
from budget.known_breakage import refusal, warnings
from budget.model import ModelSpec, model_from_config
from devtools.tiny_model import config_for

FIXTURES = Path(__file__).parent / "fixtures"
GEMMA4_31B = FIXTURES / "multimodal" / "gemma-4-31B-it.json"
GRANITE_H200 = FIXTURES / "gpu_h200_families" / "granite-4.0-h-small-shape"


def _gemma4() -> ModelSpec:
    return model_from_config(json.loads(GEMMA4_31B.read_text()), "g4", "test")


def _granite() -> ModelSpec:
    return model_from_config(json.loads((GRANITE_H200 / "config.json").read_text()), "gr", "t")


# What each refusal must name: the error vLLM stops with, the thread, and both ways out.
NAMES = {
    "gemma4": (
        "AmbiguousGlobalPerLayerAttributeError",
        "vllm-project/vllm#51744",
        "5.14.1",
        "0.28.0",
    ),
    "granite": ("KeyError: 'linear_attention'", "vllm-project/vllm#47634", "5.12.1", "0.26.0"),
    "gemma4-quack": (
        "cannot import name 'Arch' from 'cutlass.base_dsl'",
        "vllm-project/vllm#47570",
        "0.3.9 or ≥ 0.4.1",
        "0.28.0",
    ),
}
MODELS = {"gemma4": _gemma4, "granite": _granite, "gemma4-quack": _gemma4}
PACKAGE = {"gemma4": "transformers", "granite": "transformers", "gemma4-quack": "quack-kernels"}
QUACK_OK = "0.3.9"  # what served Gemma 4 on the H200 (fixtures/gpu_h200_gemma/installed.txt)


@pytest.mark.parametrize(
    ("model", "vllm", "version", "refused"),
    [
        ("gemma4", "0.24.0", "5.17.0", True),
        ("gemma4", "0.27.1", "5.15.0", True),
        ("gemma4", "0.24.0", "5.14.1", False),  # the workaround vllm#51744 names
        ("gemma4", "0.28.0", "5.17.0", False),  # vllm#49797 is in 0.28.0
        ("gemma4", "0.32.0", "5.19.0", False),
        ("gemma4", "0.24.0", None, False),  # no transformers here: the planner only warns
        ("gemma4", "0.24.0", "not-a-version", False),
        ("granite", "0.24.0", "5.17.0", True),  # the H200 start that stopped with KeyError
        ("granite", "0.25.1", "5.13.0", True),  # the first transformers that renames
        ("granite", "0.24.0", "5.12.1", False),  # the last that keeps "mamba" / "attention"
        ("granite", "0.24.0", "5.10.0", False),
        ("granite", "0.26.0", "5.17.0", False),  # 0.26.0 keys both names
        ("granite", "0.32.0", "5.19.0", False),
        ("granite", "0.24.0", None, False),
        ("gemma4-quack", "0.24.0", "0.3.11", True),  # what pip chose below 0.4 on the H200
        ("gemma4-quack", "0.24.0", "0.3.10", True),  # the first with the import
        ("gemma4-quack", "0.26.0", "0.4.0", True),  # the last, and 0.26.0's floor
        ("gemma4-quack", "0.24.0", "0.3.9", False),  # served Gemma 4 on the H200
        ("gemma4-quack", "0.26.0", "0.4.1", False),  # the import fixed
        ("gemma4-quack", "0.28.0", "0.4.0", False),  # 0.28.0 pins quack-kernels 0.6.4
        ("gemma4-quack", "0.24.0", None, False),  # not installed: FlashAttention 4 fails apart
    ],
)
def test_a_model_is_refused_only_where_the_pair_breaks(
    model: str, vllm: str, version: str | None, refused: bool
) -> None:
    package = PACKAGE[model]
    # the other packages at versions that work, so only `package` decides
    installed = {"transformers": "5.14.1", "quack-kernels": QUACK_OK, package: version}
    problem = refusal(MODELS[model](), vllm, "9.0", installed)
    assert (problem is not None) is refused
    if problem:
        assert f"vLLM {vllm} with {package} {version}" in problem
        assert all(name in problem for name in NAMES[model]), problem
        assert "\n" not in problem


def test_the_granite_refusal_names_what_the_h200_start_stopped_on() -> None:
    """The fixture's own packages (env.txt) and error line, not a restatement of the rule."""
    env = (GRANITE_H200.parent / "env.txt").read_text()
    transformers = next(
        line.split()[1] for line in env.splitlines() if line.startswith("transformers ")
    )
    problem = refusal(_granite(), "0.24.0", "9.0", {"transformers": transformers})
    assert problem is not None
    error = next(
        line.split("] ", 1)[1]
        for line in (GRANITE_H200 / "vllm.log").read_text().splitlines()
        if "KeyError" in line and "] " in line
    )
    assert error in problem


@pytest.mark.parametrize("name", ["gemma3-mm", "nemotron-h", "falcon-h1", "hybrid", "gpt-oss"])
def test_other_models_are_neither_refused_nor_warned(name: str) -> None:
    model = model_from_config(config_for(name), "m", "test")
    assert (
        refusal(model, "0.24.0", "9.0", {"transformers": "5.17.0", "quack-kernels": "0.4.0"})
        is None
    )
    assert warnings(model, "0.24.0", "9.0") == []


@pytest.mark.parametrize(
    ("args", "vllm", "needle", "warned"),
    [
        (["--model", "gemma-4-31b-it"], "0.24.0", "AmbiguousGlobalPerLayerAttributeError", True),
        (["--model", "gemma-4-31b-it"], "0.28.0", "AmbiguousGlobalPerLayerAttributeError", False),
        (["--model", str(GRANITE_H200)], "0.24.0", "KeyError: 'linear_attention'", True),
        (["--model", str(GRANITE_H200)], "0.26.0", "KeyError: 'linear_attention'", False),
        (["--model", "gemma-4-31b-it"], "0.24.0", "quack-kernels 0.3.10 to 0.4.0", True),
        (["--model", "gemma-4-31b-it"], "0.28.0", "quack-kernels 0.3.10 to 0.4.0", False),
    ],
)
def test_the_plan_warns_for_a_release_before_the_fix(
    args: list[str], vllm: str, needle: str, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", *args, "--hardware", "h200", "--vllm-version", vllm, "--json"]
    assert main(argv) in (0, 1)
    found = json.loads(capsys.readouterr().out)["warnings"]
    assert any(needle in w for w in found) is warned


@pytest.mark.parametrize(
    ("sm", "refused"),
    [("9.0", True), ("10.0", True), ("11.0", True), ("12.1", False), ("8.9", False), ("", False)],
)
def test_the_quack_failure_is_refused_only_where_vllm_picks_flashattention_4(
    sm: str, refused: bool
) -> None:
    """vLLM 0.24 puts Gemma 4 on FlashAttention 4 on compute capability 9.x to 11.x and on
    TRITON_ATTN elsewhere (a DGX Spark's GB10 is 12.1), which never imports quack."""
    installed = {"transformers": "5.14.1", "quack-kernels": "0.3.11"}
    assert (refusal(_gemma4(), "0.24.0", sm, installed) is not None) is refused
    assert any("quack-kernels" in w for w in warnings(_gemma4(), "0.24.0", sm)) is refused


def test_a_spark_plan_of_gemma4_does_not_warn_of_quack(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "gemma-4-31b-it", "--hardware", "dgx-spark", "--json"]
    assert main([*argv, "--vllm-version", "0.24.0"]) in (0, 1)
    found = json.loads(capsys.readouterr().out)["warnings"]
    assert not any("quack" in w for w in found)
    assert any("AmbiguousGlobalPerLayerAttributeError" in w for w in found)
