"""Gemma 4 on a vLLM before 0.28.0: the planner warns, the entrypoint refuses when the
installed transformers is 5.15 or later (vllm-project/vllm#51744)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget.cli import main
from budget.known_breakage import gemma4_refusal, gemma4_warning
from budget.model import ModelSpec, model_from_config
from devtools.tiny_model import config_for

GEMMA4_31B = Path(__file__).parent / "fixtures" / "multimodal" / "gemma-4-31B-it.json"


def _gemma4() -> ModelSpec:
    return model_from_config(json.loads(GEMMA4_31B.read_text()), "g4", "test")


@pytest.mark.parametrize(
    ("vllm", "transformers", "refused"),
    [
        ("0.24.0", "5.17.0", True),
        ("0.27.1", "5.15.0", True),
        ("0.24.0", "5.14.1", False),  # the workaround vllm#51744 names
        ("0.28.0", "5.17.0", False),  # vllm#49797 is in 0.28.0
        ("0.32.0", "5.19.0", False),
        ("0.24.0", None, False),  # no transformers here: the planner only warns
        ("0.24.0", "not-a-version", False),
    ],
)
def test_gemma4_is_refused_only_where_the_pair_breaks(
    vllm: str, transformers: str | None, refused: bool
) -> None:
    problem = gemma4_refusal(_gemma4(), vllm, transformers)
    assert (problem is not None) is refused
    if problem:
        assert f"vLLM {vllm} with transformers {transformers}" in problem
        assert "vllm-project/vllm#51744" in problem and "5.14.1" in problem


def test_other_models_are_not_refused() -> None:
    gemma3 = model_from_config(config_for("gemma3-mm"), "g3", "test")
    assert gemma4_refusal(gemma3, "0.24.0", "5.17.0") is None
    assert gemma4_warning(gemma3, "0.24.0") is None


@pytest.mark.parametrize(("vllm", "warned"), [("0.24.0", True), ("0.28.0", False)])
def test_the_plan_warns_for_a_vllm_before_0_28(
    vllm: str, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--model", "gemma-4-31b-it", "--vllm-version", vllm, "--json"]
    assert main(args) in (0, 1)
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("AmbiguousGlobalPerLayerAttributeError" in w for w in warnings) is warned
