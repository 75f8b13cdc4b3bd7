"""The gpt-oss profiles: the published config's shapes, planned on one DGX Spark at the
model's full context (131,072 tokens, config.json's max_position_embeddings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget.cli import main
from budget.profiles import load_model
from tests.budget.test_mxfp4_weights import GPT_OSS

FULL_CONTEXT = 131072


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gpt-oss-20b"])
def test_the_profile_fits_one_spark_at_full_context(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--model", name, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] and plan["hardware"] == "dgx-spark"
    assert plan["settings"]["max_model_len"] == FULL_CONTEXT
    assert plan["max_concurrency"] >= 1
    assert plan["settings"]["weight_formats"]["routed_experts"] == "mxfp4"


@pytest.mark.parametrize(
    ("name", "layers", "experts"), [("gpt-oss-120b", 36, 128), ("gpt-oss-20b", 24, 32)]
)
def test_the_profile_reads_as_the_published_config_does(
    name: str, layers: int, experts: int, tmp_path: Path
) -> None:
    config = dict(GPT_OSS, num_hidden_layers=layers, num_local_experts=experts)
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_dir = load_model(str(tmp_path)).spec
    from_profile = load_model(name).spec
    assert from_profile == type(from_profile)(**{**from_dir.__dict__, "name": name})
