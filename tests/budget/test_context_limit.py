"""max_model_len above the model's derived context is refused as vLLM 0.32 refuses it
(config/model.py `_get_and_verify_max_len`), naming VLLM_ALLOW_LONG_MAX_MODEL_LEN."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main
from devtools.tiny_model import config_for

NATIVE = 4096
CPU = ["--device", "cpu", "--kv-cache-memory-bytes", "256M", "--json"]


def model_dir(tmp_path: Path, **changes: Any) -> Path:
    cfg = {**config_for("dense", max_position=NATIVE), **changes}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def planned_len(capsys: pytest.CaptureFixture[str], model: Path, *args: str) -> int:
    assert main(["plan", "--model", str(model), *CPU, *args]) == 0
    return int(json.loads(capsys.readouterr().out)["settings"]["max_model_len"])


def refused(capsys: pytest.CaptureFixture[str], model: Path, length: int) -> str:
    assert main(["plan", "--model", str(model), *CPU, "--max-model-len", str(length)]) == 2
    return capsys.readouterr().err


def test_above_max_position_embeddings_is_refused_naming_vllms_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, model_dir(tmp_path), NATIVE + 1)
    assert f"max_position_embeddings={NATIVE}" in err
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in err
    assert err.count("\n") == 1


def test_the_native_length_itself_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert planned_len(capsys, model_dir(tmp_path), "--max-model-len", str(NATIVE)) == NATIVE


def test_allowing_long_contexts_plans_it_as_vllm_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = model_dir(tmp_path)
    longer = ["--max-model-len", str(2 * NATIVE), "--allow-long-max-model-len"]
    assert planned_len(capsys, model, *longer) == 2 * NATIVE


def test_a_rope_factor_raises_the_default_and_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = model_dir(tmp_path, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    assert planned_len(capsys, model) == 4 * NATIVE
    assert refused(capsys, model, 4 * NATIVE + 1)


def test_yarn_and_llama3_factors_are_already_in_max_position_embeddings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = model_dir(tmp_path, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    assert planned_len(capsys, model) == NATIVE


def test_the_smallest_length_key_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = model_dir(tmp_path, seq_length=NATIVE // 2)
    assert f"seq_length={NATIVE // 2}" in refused(capsys, model, NATIVE)


def test_the_tokenizers_model_max_length_caps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = model_dir(tmp_path)
    (model / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1024}))
    assert planned_len(capsys, model) == 1024
    assert "tokenizer_config.json model_max_length=1024" in refused(capsys, model, 2048)
