"""Weights summed from real checkpoints' safetensors headers, against the bytes the
safetensors library reads back; broken checkpoints are exit 2 with one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main
from devtools.tiny_model import config_for
from tests.budget.checkpoints import tensor_bytes, write_awq_checkpoint, write_hf_checkpoint

CPU = ["--device", "cpu", "--kv-cache-memory-bytes", "64M", "--max-model-len", "4096"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    made = {kind: write_hf_checkpoint(root / kind, kind) for kind in ("dense", "moe", "hybrid")}
    made["single"] = write_hf_checkpoint(root / "single", "dense", max_shard_size="1GB")
    made["awq"] = write_awq_checkpoint(root / "awq")
    return made


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def weights(plan: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in plan["components"].items() if k.startswith("weights.")}


@pytest.mark.parametrize("kind", ["dense", "moe", "hybrid", "single", "awq"])
def test_planned_weights_are_the_bytes_in_the_files(
    kind: str, checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_json(capsys, "--model", str(checkpoints[kind]), *CPU)
    assert sum(weights(plan).values()) == tensor_bytes(checkpoints[kind])


def test_a_sharded_checkpoint_is_read_through_its_index(checkpoints: dict[str, Path]) -> None:
    assert (checkpoints["hybrid"] / "model.safetensors.index.json").is_file()
    assert len(list(checkpoints["hybrid"].glob("*.safetensors"))) > 1


@pytest.mark.parametrize(
    ("kind", "component", "name_part"),
    [
        ("hybrid", "weights.gdn", ".linear_attn."),
        ("moe", "weights.routed_experts", ".mlp.experts."),
        ("awq", "weights.attention", "_proj."),
    ],
)
def test_each_component_holds_its_own_tensors(
    kind: str,
    component: str,
    name_part: str,
    checkpoints: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = plan_json(capsys, "--model", str(checkpoints[kind]), *CPU)
    if kind == "awq":  # attention = the q/k/v/o projections (MLP projections apart)
        expected = sum(tensor_bytes(checkpoints[kind], f"self_attn.{p}_proj.") for p in "qkvo")
    else:
        expected = tensor_bytes(checkpoints[kind], name_part)
    assert plan["components"][component] == expected


def test_the_quantized_layout_is_smaller_than_bf16_parameters(
    checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    awq = plan_json(capsys, "--model", str(checkpoints["awq"]), *CPU)
    dense = plan_json(capsys, "--model", str(checkpoints["dense"]), *CPU)
    assert awq["components"]["weights.dense_mlp"] < dense["components"]["weights.dense_mlp"] / 3
    assert awq["weights_source"]["quantization"] == "awq"


def test_table_and_json_say_where_the_weights_came_from(
    checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_json(capsys, "--model", str(checkpoints["moe"]), *CPU)
    assert plan["weights_source"]["kind"] == "checkpoint headers"
    assert plan["estimates"]["weights.routed_experts"].startswith("exact: checkpoint headers")
    assert main(["plan", "--model", str(checkpoints["moe"]), *CPU]) == 0
    table = capsys.readouterr().out
    assert "exact: checkpoint headers" in table


def test_tensor_parallel_splits_all_but_norms_and_routers(
    checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = ["--hardware", "h200", "--max-model-len", "4096"]
    one = plan_json(capsys, "--model", str(checkpoints["moe"]), *gpu)
    two = plan_json(capsys, "--model", str(checkpoints["moe"]), *gpu, "--tp", "2")
    for name, size in weights(one).items():
        whole = name in ("weights.norms", "weights.router")
        assert weights(two)[name] == (size if whole else -(-size // 2)), name


def test_without_safetensors_the_parameter_count_is_used(
    tmp_path: Path, checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(checkpoints["dense"] / "config.json", bare / "config.json")
    plan = plan_json(capsys, "--model", str(bare), *CPU)
    assert plan["weights_source"]["kind"] == "parameter count × format"
    assert plan["estimates"]["weights.attention"] == "exact: parameter count × format"


def broken_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def refusal(capsys: pytest.CaptureFixture[str], model: Path) -> str:
    assert main(["plan", "--model", str(model), *CPU]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_an_index_naming_an_absent_shard_is_exit_2(
    tmp_path: Path, checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    model = broken_copy(checkpoints["hybrid"], tmp_path / "m")
    shard = sorted(model.glob("*.safetensors"))[-1]
    shard.unlink()
    assert f"names shard {shard.name!r}, which is not in" in refusal(capsys, model)


def test_a_header_length_past_the_end_is_exit_2(
    tmp_path: Path, checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    model = broken_copy(checkpoints["single"], tmp_path / "m")
    path = model / "model.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    assert "runs past the end of the file (100 bytes)" in refusal(capsys, model)


def test_truncated_tensor_data_is_exit_2(
    tmp_path: Path, checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    model = broken_copy(checkpoints["single"], tmp_path / "m")
    path = model / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])
    err = refusal(capsys, model)
    assert "past the file's" in err and "truncated" in err


def test_a_header_that_is_not_json_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path]
) -> None:
    model = tmp_path / "m"
    model.mkdir()
    shutil.copy(checkpoints["dense"] / "config.json", model / "config.json")
    header = b"{not json"
    (model / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert "header is not valid JSON" in refusal(capsys, model)


@pytest.mark.parametrize(
    ("quantization_config", "weights_dtype"),
    [
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4"),
    ],
)
def test_without_safetensors_quantization_config_sets_the_format(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    quantization_config: dict[str, Any],
    weights_dtype: str,
) -> None:
    cfg = {**config_for("dense"), "quantization_config": quantization_config}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from_config = plan_json(capsys, "--model", str(tmp_path), *CPU)
    (tmp_path / "config.json").write_text(json.dumps(config_for("dense")))
    given = plan_json(capsys, "--model", str(tmp_path), *CPU, "--weights-dtype", weights_dtype)
    assert weights(from_config) == weights(given)
    assert weights(from_config) != weights(plan_json(capsys, "--model", str(tmp_path), *CPU))
