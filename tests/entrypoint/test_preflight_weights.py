"""The pre-flight checks the weights vLLM will load (as the planner reads them), unless
the load format needs none; a drafter, a long context and the speculative config reach
vLLM as the plan has them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from devtools.tiny_model import write_tiny_model
from entrypoint.config import load_config
from entrypoint.errors import EXIT_BAD_CONFIG, PreflightError
from entrypoint.planning import build_launch
from entrypoint.preflight import check_weights

CPU: dict[str, Any] = {"device": "cpu", "kv_cache_memory_bytes": 256 * 2**20, "max_model_len": 4096}


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    return write_tiny_model(tmp_path / "bare", "dense")


@pytest.fixture
def with_weights(bare: Path) -> Path:
    save_file(
        {"model.norm.weight": torch.ones(64, dtype=torch.bfloat16)}, str(bare / "m.safetensors")
    )
    return bare


def plan_for(model: Path) -> Plan:
    return build_plan(PlanOptions(model=str(model), **CPU))


def test_a_directory_without_weights_is_refused_before_vllm_starts(bare: Path) -> None:
    with pytest.raises(PreflightError, match="Cannot find any model weights") as err:
        check_weights(load_config({}), plan_for(bare))
    assert err.value.exit_code == EXIT_BAD_CONFIG
    assert "SPARKSERVE_LOAD_FORMAT=dummy" in str(err.value)


@pytest.mark.parametrize(
    "settings",
    [
        {"SPARKSERVE_LOAD_FORMAT": "dummy"},
        {"SPARKSERVE_VLLM_EXTRA_ARGS": "--load-format dummy"},
        {"SPARKSERVE_VLLM_EXTRA_ARGS": "--load-format=dummy"},
    ],
)
def test_a_load_format_that_needs_no_files_needs_no_weights(
    bare: Path, settings: dict[str, str]
) -> None:
    check_weights(load_config(settings), plan_for(bare))


def test_safetensors_weights_pass(with_weights: Path) -> None:
    check_weights(load_config({}), plan_for(with_weights))


def test_the_safetensors_format_does_not_take_bin_files(bare: Path) -> None:
    (bare / "pytorch_model.bin").write_bytes(b"\0")
    check_weights(load_config({}), plan_for(bare))  # auto takes *.bin
    with pytest.raises(PreflightError, match=r"no weights \(\*\.safetensors\)"):
        check_weights(load_config({"SPARKSERVE_LOAD_FORMAT": "safetensors"}), plan_for(bare))


def test_broken_weights_named_by_sparkserve_weights_are_refused(
    with_weights: Path, tmp_path: Path
) -> None:
    weights = tmp_path / "weights"
    shutil.copytree(with_weights, weights)
    (weights / "m.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{}")
    profile_plan = build_plan(PlanOptions(hardware="h200", weights_dtype="fp8"))
    with pytest.raises(PreflightError, match="SPARKSERVE_WEIGHTS=.*runs past the end"):
        check_weights(load_config({"SPARKSERVE_WEIGHTS": str(weights)}), profile_plan)


def test_the_speculative_config_and_long_context_reach_vllm(
    with_weights: Path, tmp_path: Path
) -> None:
    draft = write_tiny_model(tmp_path / "draft", "dense")
    spec = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2}
    config = load_config(
        {
            "SPARKSERVE_MODEL": str(with_weights),
            "SPARKSERVE_DEVICE": "cpu",
            "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "256M",
            "SPARKSERVE_MAX_MODEL_LEN": "8192",
            "SPARKSERVE_ALLOW_LONG_MAX_MODEL_LEN": "on",
            "SPARKSERVE_SPECULATIVE_CONFIG": json.dumps(spec),
        }
    )
    plan = build_plan(config.plan)
    launch = build_launch(config, plan)
    argv = list(launch.argv)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == spec
    assert launch.env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert "draft_model" in plan.components
    with pytest.raises(PreflightError, match="SPARKSERVE_SPECULATIVE_CONFIG model=.*no weights"):
        check_weights(config, plan)
