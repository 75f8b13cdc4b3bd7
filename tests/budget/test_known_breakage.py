"""Starts a vLLM release cannot make with a recent transformers: the planner warns, the
entrypoint refuses where the installed pair is one that fails (budget/known_breakage.py).

- Gemma 4 on a vLLM before 0.28.0 with transformers 5.15 or later (vllm-project/vllm#51744).
- Granite-4.0-H on a vLLM before 0.26.0 with transformers 5.13 or later
  (vllm-project/vllm#47634); the H200 start of `fixtures/gpu_h200_families/` failed so.
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
}
MODELS = {"gemma4": _gemma4, "granite": _granite}


@pytest.mark.parametrize(
    ("model", "vllm", "transformers", "refused"),
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
    ],
)
def test_a_model_is_refused_only_where_the_pair_breaks(
    model: str, vllm: str, transformers: str | None, refused: bool
) -> None:
    problem = refusal(MODELS[model](), vllm, transformers)
    assert (problem is not None) is refused
    if problem:
        assert f"vLLM {vllm} with transformers {transformers}" in problem
        assert all(name in problem for name in NAMES[model]), problem
        assert "\n" not in problem


def test_the_granite_refusal_names_what_the_h200_start_stopped_on() -> None:
    """The fixture's own packages (env.txt) and error line, not a restatement of the rule."""
    env = (GRANITE_H200.parent / "env.txt").read_text()
    transformers = next(
        line.split()[1] for line in env.splitlines() if line.startswith("transformers ")
    )
    problem = refusal(_granite(), "0.24.0", transformers)
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
    assert refusal(model, "0.24.0", "5.17.0") is None
    assert warnings(model, "0.24.0") == []


@pytest.mark.parametrize(
    ("args", "vllm", "needle", "warned"),
    [
        (["--model", "gemma-4-31b-it"], "0.24.0", "AmbiguousGlobalPerLayerAttributeError", True),
        (["--model", "gemma-4-31b-it"], "0.28.0", "AmbiguousGlobalPerLayerAttributeError", False),
        (["--model", str(GRANITE_H200)], "0.24.0", "KeyError: 'linear_attention'", True),
        (["--model", str(GRANITE_H200)], "0.26.0", "KeyError: 'linear_attention'", False),
    ],
)
def test_the_plan_warns_for_a_release_before_the_fix(
    args: list[str], vllm: str, needle: str, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", *args, "--hardware", "h200", "--vllm-version", vllm, "--json"]
    assert main(argv) in (0, 1)
    found = json.loads(capsys.readouterr().out)["warnings"]
    assert any(needle in w for w in found) is warned
