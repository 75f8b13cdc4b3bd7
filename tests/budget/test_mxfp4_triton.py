"""gpt-oss's MXFP4 experts on an SM 9.0 GPU, as vLLM's TRITON MoE backend keeps them.

The expected bytes are worked out here from the tensor shapes vLLM creates and the
padding its sources apply, for gpt-oss-120b (hidden 2880, intermediate 2880, 128
experts, 36 layers; E = 128):
- quantization/mxfp4.py `create_weights`: w13 (E, 2·I, H/2) uint8 values and
  (E, 2·I, H/32) scales, w2 (E, H, I/2) and (E, H, I/32), bf16 biases (E, 2·I), (E, H);
- oracle/mxfp4.py: the TRITON branch rounds I per rank up to 64, turns the biases to
  float32 and swizzles; 0.20.1 and 0.24.0 `del` only the values, 0.25.1+ the scales too;
- triton_kernels' hopper_value.py pads (rows, bytes) to (64, 64) in 0.20.1 and to
  (16, 32) in 0.24.0+; hopper_scale.py pads rows to 256 and scale columns to 2, and
  mxfp4_utils.py `_swizzle_mxfp4` pads the scale columns to 4 first from 0.26.0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main
from tests.budget.test_mxfp4_weights import GPT_OSS, MXFP4_BLOCK, write_config

E, H, L = 128, 2880, 36
FP32, BF16 = 4, 2


def plan(directory: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    argv = ["plan", "--model", str(directory), "--hardware", "h200", *extra, "--json"]
    assert main(argv) in (0, 1)
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def experts(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> int:
    components = plan(write_config(tmp_path, GPT_OSS), capsys, *extra)["components"]
    value: int = components["weights.routed_experts"]
    return value


# (release, TP) → one layer's bytes: values, swizzled scales, loaded scales, biases.
PER_LAYER = {
    # I = 2880: w13 rows 5760 (swizzled scale rows 5888), w2 rows 2880 (3072).
    ("0.20.1", 1): E * (5760 * 1472 + 2880 * 1472)  # bytes 1440 → 1472
    + E * (5888 * 90 + 3072 * 90)
    + E * (5760 * 90 + 2880 * 90)
    + E * (5760 + 2880) * FP32,
    ("0.24.0", 1): E * (5760 * 1440 + 2880 * 1440)
    + E * (5888 * 90 + 3072 * 90)
    + E * (5760 * 90 + 2880 * 90)
    + E * (5760 + 2880) * FP32,
    ("0.25.1", 1): E * (5760 * 1440 + 2880 * 1440)
    + E * (5888 * 90 + 3072 * 90)
    + E * (5760 + 2880) * FP32,
    ("0.33.0", 1): E * (5760 * 1440 + 2880 * 1440)
    + E * (5888 * 92 + 3072 * 92)  # 90 scale columns → 92
    + E * (5760 + 2880) * FP32,
    # TP 2: I per rank 1440 → 1472; w13 rows 2944 (scale rows 3072, columns 90 → 92),
    # w2 736 bytes a row, 46 scale columns → 48.
    ("0.33.0", 2): E * (2944 * 1440 + 2880 * 736)
    + E * (3072 * 92 + 3072 * 48)
    + E * (2944 + 2880) * FP32,
}


@pytest.mark.parametrize(("version", "tp"), list(PER_LAYER))
def test_experts_are_the_repacked_tensors(
    version: str, tp: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ("--vllm-version", version, "--tp", str(tp))
    assert experts(capsys, tmp_path, *extra) == L * PER_LAYER[(version, tp)]


def test_the_router_keeps_only_its_own_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The experts' biases went to the experts, in float32."""
    components = plan(write_config(tmp_path, GPT_OSS), capsys, "--vllm-version", "0.24.0")[
        "components"
    ]
    assert components["weights.router"] == L * (H * E + E) * BF16


def test_the_note_says_which_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    estimates = plan(write_config(tmp_path, GPT_OSS), capsys, "--vllm-version", "0.24.0")[
        "estimates"
    ]
    note = estimates["weights.routed_experts"]
    assert "TRITON" in note and "loaded scales kept" in note and "float32" in note


def test_other_gpus_keep_the_checkpoint_layout_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write_config(tmp_path, GPT_OSS)
    assert main(["plan", "--model", str(directory), "--hardware", "dgx-spark", "--json"]) in (0, 1)
    result = json.loads(capsys.readouterr().out)
    params = L * E * 3 * H * 2880
    assert result["components"]["weights.routed_experts"] == params // 2 + params // MXFP4_BLOCK
    assert "assumed" in result["estimates"]["weights.routed_experts"]
    assert "SM 12.1" in result["estimates"]["weights.routed_experts"]
