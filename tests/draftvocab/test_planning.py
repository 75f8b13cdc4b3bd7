"""The draft vocabulary in the plan and at the entrypoint's pre-flight: rows from the
checkpoint `python -m draftvocab` wrote (bytes from its headers), from --draft-vocab N,
refused where vLLM could not serve it; the plugin turned on exactly with it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from budget.options import PlanOptions
from budget.planner import build_plan
from devtools.tiny_model import config_for, write_tiny_model
from draftvocab import plugin
from entrypoint.config import load_config
from entrypoint.errors import PreflightError
from entrypoint.planning import build_launch
from entrypoint.preflight import check_draft_vocab

CPU: dict[str, Any] = {
    "device": "cpu", "kv_cache_memory_bytes": 64 * 2**20, "max_model_len": 1024, "mtp": 2,
    "prefix_caching": False,
}  # fmt: skip
ROWS = 300


def _source(directory: Path, architecture: str = "Qwen3NextForCausalLM") -> Path:
    """The tiny hybrid-mtp config with a few real tensors: an lm_head, an MTP weight."""
    write_tiny_model(directory, "hybrid-mtp")
    config = config_for("hybrid-mtp") | {"architectures": [architecture]}
    (directory / "config.json").write_text(json.dumps(config))
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    save_file(
        {
            "lm_head.weight": torch.randn(vocab, hidden, dtype=torch.bfloat16),
            "mtp.fc.weight": torch.randn(hidden, 2 * hidden, dtype=torch.bfloat16),
        },
        str(directory / "model.safetensors"),
    )
    return directory


def _reduced(root: Path, architecture: str = "Qwen3NextForCausalLM") -> Path:
    counts = root / "counts.json"
    counts.write_text(json.dumps({"5": 3}))
    made = subprocess.run(
        [sys.executable, "-m", "draftvocab", str(_source(root / "src", architecture)), "--out",
         str(root / "dst"), "--rows", str(ROWS), "--counts", str(counts)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return root / "dst"


@pytest.fixture(scope="module")
def reduced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reduced(tmp_path_factory.mktemp("dv"))


def test_the_rows_and_their_bytes_come_from_the_checkpoint(reduced):
    plan = build_plan(PlanOptions(model=str(reduced), **CPU))
    hidden = config_for("hybrid-mtp")["hidden_size"]
    assert plan.settings.draft_vocab_rows == ROWS
    # bf16 head rows and the int64 map, as written, not rows × hidden × 2 estimated.
    assert plan.components["draft_vocab_slice"] == ROWS * hidden * 2 + ROWS * 8
    assert "mtp_module" in plan.components  # the rest of mtp.* still counts there


def test_n_rows_are_planned_at_the_models_hidden_size(tmp_path):
    plan = build_plan(PlanOptions(model=str(_source(tmp_path)), draft_vocab=500, **CPU))
    hidden = config_for("hybrid-mtp")["hidden_size"]
    assert plan.components["draft_vocab_slice"] == 500 * hidden * 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--draft-vocab", "on"], "config.json has no draft_vocab_size: make the reduced head"),
        (["--draft-vocab", "5000"], "draft_vocab=5000; must be 1 to the vocabulary size (1024)"),
        (["--draft-vocab", "lots"], "must be on, off or a positive whole number of rows"),
    ],
)
def test_bad_draft_vocab_is_exit_2(tmp_path, args, message):
    result = subprocess.run(
        [sys.executable, "-m", "budget", "plan", "--model", str(_source(tmp_path)), "--device",
         "cpu", "--mtp", "2", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def _config(model: Path, **env: str) -> Any:
    return load_config(
        {"SPARKSERVE_MODEL": str(model), "SPARKSERVE_DEVICE": "cpu", "SPARKSERVE_MTP": "2",
         "SPARKSERVE_MAX_MODEL_LEN": "1024", "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "64M",
         "SPARKSERVE_PREFIX_CACHING": "off", **env}
    )  # fmt: skip


def test_the_plugin_is_on_exactly_with_a_draft_vocabulary(reduced, tmp_path):
    on = _config(reduced)
    plan = build_plan(on.plan)
    check_draft_vocab(on, plan)
    assert build_launch(on, plan).env[plugin.ENV] == "on"
    off = _config(_source(tmp_path), SPARKSERVE_DRAFT_VOCAB="off")
    assert build_launch(off, build_plan(off.plan)).env[plugin.ENV] == "off"


def test_a_reduced_checkpoint_without_the_plugin_is_refused(reduced):
    config = _config(reduced, SPARKSERVE_DRAFT_VOCAB="off")
    with pytest.raises(PreflightError, match="vLLM's own MTP drafter cannot load"):
        check_draft_vocab(config, build_plan(config.plan))


def test_rows_the_checkpoint_does_not_have_are_refused(reduced):
    config = _config(reduced, SPARKSERVE_DRAFT_VOCAB="200")
    with pytest.raises(PreflightError, match="plans 200 draft rows, but .* draft_vocab_size=300"):
        check_draft_vocab(config, build_plan(config.plan))


def test_a_model_the_plugin_does_not_serve_is_refused(tmp_path):
    """The planner refuses a DeepSeek-V3 config itself (budget/families.py); the
    pre-flight still guards a plan of any architecture outside the plugin's."""
    config = _config(_source(tmp_path), SPARKSERVE_DRAFT_VOCAB="100")
    plan = build_plan(config.plan)
    plan.model = replace(plan.model, architecture="DeepseekV3ForCausalLM")  # vLLM's DeepSeekMTP
    with pytest.raises(PreflightError, match="only, not DeepseekV3ForCausalLM"):
        check_draft_vocab(config, plan)


def test_a_reduced_qwen3_5_checkpoint_passes_the_pre_flight_with_a_warning(tmp_path):
    config = _config(_reduced(tmp_path, "Qwen3_5MoeForCausalLM"), SPARKSERVE_DRAFT_VOCAB="on")
    warning = check_draft_vocab(config, build_plan(config.plan))  # no PreflightError
    assert warning and "Qwen3_5MoeMTP drafter has never been served by a real vLLM" in warning


def test_the_qwen3_next_drafter_served_on_vllm_cpu_passes_without_a_warning(reduced):
    config = _config(reduced)
    assert check_draft_vocab(config, build_plan(config.plan)) is None


@pytest.mark.parametrize("version", ["0.25.0", "0.31.0", "0.33.0", "0.32.1"])
def test_the_plugin_refuses_vllm_releases_it_was_not_tested_on(version):
    with pytest.raises(plugin.UnsupportedVLLMError, match=f"this is vLLM {version}"):
        plugin.check_version(version)


def test_the_plugin_does_nothing_unless_on(monkeypatch):
    monkeypatch.delenv(plugin.ENV, raising=False)
    plugin.register()  # no vLLM import, no error
    monkeypatch.setenv(plugin.ENV, "maybe")
    with pytest.raises(ValueError, match="must be on or off"):
        plugin.register()


def test_a_profile_without_rows_of_its_own_takes_the_articles_65536():
    plan = build_plan(
        PlanOptions(model="qwen3-next-80b-a3b", hardware="h200", mtp=1, draft_vocab=True)
    )
    hidden = plan.model.hidden_size
    assert plan.settings.draft_vocab_rows == 65_536
    assert plan.components["draft_vocab_slice"] == 65_536 * hidden * 2


def test_a_vllm_the_plugin_was_not_tested_on_is_refused_at_pre_flight(reduced):
    config = _config(reduced, SPARKSERVE_VLLM_VERSION="0.25.0")
    with pytest.raises(PreflightError, match="needs vLLM 0.24.0, 0.32.0 .* this is vLLM 0.25.0"):
        check_draft_vocab(config, build_plan(config.plan))


@pytest.mark.parametrize(
    ("architecture", "warned"),
    [
        ("Qwen3NextForCausalLM", False),  # served on a GPU (fixtures/gpu_h100_vllm_0.24.0)
        ("Qwen3_5MoeForConditionalGeneration", False),  # the same
        ("Qwen3_5ForConditionalGeneration", True),  # its Qwen3_5MTP never loaded
    ],
)
def test_on_vllm_0_24_a_drafter_never_served_passes_with_a_warning(reduced, architecture, warned):
    config = _config(reduced, SPARKSERVE_VLLM_VERSION="0.24.0")
    plan = build_plan(config.plan)
    plan.model = replace(plan.model, architecture=architecture)
    warning = check_draft_vocab(config, plan)
    if warned:
        assert warning
        assert "Qwen3_5MTP drafter has never been served by a real vLLM 0.24.0" in warning
    else:
        assert warning is None


def test_on_vllm_0_24_a_text_only_qwen3_5_target_is_refused(tmp_path):
    """vLLM 0.24.0 has no Qwen3_5ForCausalLM, and builds no MTP drafter for it."""
    model = _reduced(tmp_path, "Qwen3_5ForCausalLM")
    config = _config(model, SPARKSERVE_DRAFT_VOCAB="on", SPARKSERVE_VLLM_VERSION="0.24.0")
    with pytest.raises(PreflightError, match="vLLM 0.24.0 builds no MTP drafter .* for Qwen3_5Fo"):
        check_draft_vocab(config, build_plan(config.plan))
