"""`python -m budget plan --stack FILE`: several models on one box (budget/stack.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from budget.cli import main
from budget.errors import BudgetError
from budget.flags import vllm_args
from budget.options import PlanOptions
from budget.planner import build_plan
from budget.stack import (
    CUDA_CONTEXT_BYTES,
    RUNTIME_SPREAD_BYTES,
    StackPlan,
    load_stack,
    plan_stack,
)

EXAMPLE = Path(__file__).parents[2] / "budget/profiles/stacks/dgx-spark-chat-embed.toml"

CHAT = """
[[models]]
name = "chat"
role = "chat"
model = "qwen3-30b-a3b"
max_model_len = 40960
max_num_seqs = 8
"""
EMBED = """
[[models]]
name = "embed"
role = "embedding"
model = "qwen3-embedding-0.6b"
max_model_len = 8192
max_num_seqs = 16
kv_cache_memory_bytes = "2G"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(text)
    return path


def _plan(tmp_path: Path, text: str) -> StackPlan:
    return plan_stack(load_stack(_write(tmp_path, text)))


def test_example_fits_with_the_system_reserve_counted_once() -> None:
    stack = plan_stack(load_stack(EXAMPLE))
    assert stack.fits
    for m in stack.models:
        assert "system_reserve" not in m.plan.components
    alone = build_plan(PlanOptions(model="qwen3-30b-a3b", hardware="dgx-spark"))
    assert stack.system_reserve_bytes == alone.components["system_reserve"] > 0
    # Each vLLM also holds its CUDA context, outside its plan and its request.
    assert [m.held_bytes - m.total_bytes for m in stack.models] == [CUDA_CONTEXT_BYTES] * 2
    assert stack.total_bytes == sum(m.total_bytes + CUDA_CONTEXT_BYTES for m in stack.models) + (
        stack.system_reserve_bytes
    )
    assert stack.total_bytes + stack.headroom_bytes == stack.memory_bytes


def test_each_model_passes_its_planned_pool_and_a_covering_fraction() -> None:
    stack = plan_stack(load_stack(EXAMPLE))
    for m in stack.models:
        args = vllm_args(m.plan)
        i = args.index("--kv-cache-memory-bytes")
        assert int(args[i + 1]) == m.plan.kv_cache_bytes > 0
        util = float(args[args.index("--gpu-memory-utilization") + 1])
        total = stack.memory_bytes
        assert m.plan.vllm_allocated_bytes <= math.ceil(total * util)
    embed = next(m for m in stack.models if m.role == "embedding")
    args = vllm_args(embed.plan)
    assert args[args.index("--runner") + 1] == "pooling"
    assert "weights.lm_head" not in embed.plan.components
    assert "--speculative-config" not in args


def test_the_pooling_runner_leaves_prefill_features_to_vllm(tmp_path: Path) -> None:
    """vLLM picks chunked prefill and prefix caching from the pooler
    (config/model.py `is_chunked_prefill_supported`, 0.32.0); off stays off."""
    stack = _plan(tmp_path, 'hardware = "dgx-spark"\n' + CHAT + EMBED)
    chat, embed = (vllm_args(m.plan) for m in stack.models)
    assert "--enable-chunked-prefill" in chat and "--enable-prefix-caching" in chat
    assert not [a for a in embed if "chunked-prefill" in a or "prefix-caching" in a]
    off = _plan(tmp_path, 'hardware = "dgx-spark"\n' + EMBED + "prefix_caching = false\n")
    args = vllm_args(off.models[0].plan)
    assert "--no-enable-prefix-caching" in args and "--enable-chunked-prefill" not in args


def test_start_order_is_largest_first_and_every_check_passes() -> None:
    stack = plan_stack(load_stack(EXAMPLE))
    assert stack.start_order == ["chat", "embed"]
    first, second = stack.start_checks
    # vLLM measures once its own CUDA context exists; the chat model holds its plan and
    # its context when the embedding model starts.
    usable = stack.memory_bytes - stack.system_reserve_bytes
    assert first.free_bytes == usable - CUDA_CONTEXT_BYTES
    chat = stack.models[0]
    assert second.free_bytes == usable - chat.total_bytes - 2 * CUDA_CONTEXT_BYTES
    assert all(c.passes for c in stack.start_checks)


def test_shares_split_what_the_reserve_leaves(tmp_path: Path) -> None:
    text = 'hardware = "h200"\n' + CHAT + "memory_share = 0.7\n" + EMBED
    stack = _plan(tmp_path, text)
    assert stack.system_reserve_bytes == 0  # a discrete GPU
    chat = stack.models[0]
    assert chat.slice_bytes == int(stack.memory_bytes * 0.7)
    # The pool fills the slice but for the CUDA context, the request's rounding (0.001
    # of the box) and the calibrated runtime's spread.
    leaves = CUDA_CONTEXT_BYTES + stack.memory_bytes // 1000 + 1 + RUNTIME_SPREAD_BYTES
    assert chat.total_bytes == chat.slice_bytes - leaves
    assert stack.fits


def test_a_stack_that_does_not_fit_names_the_model_and_the_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = 'hardware = "rtx-4090"\n' + CHAT + "memory_share = 0.5\n" + EMBED
    stack = _plan(tmp_path, text)
    assert not stack.fits
    assert any(line.startswith("chat: its slice") for line in stack.shortfalls)
    assert "GiB short" in stack.shortfalls[0]
    assert main(["plan", "--stack", str(tmp_path / "stack.toml")]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "→ chat: its slice" in out


def test_fixed_pools_over_the_box_say_by_how_much(tmp_path: Path) -> None:
    text = 'hardware = "dgx-spark"\n' + CHAT + 'kv_cache_memory_bytes = "100G"\n' + EMBED
    stack = _plan(tmp_path, text)
    assert not stack.fits
    over = -stack.headroom_bytes
    assert any(f"{over / 2**30:.2f} GiB over" in line for line in stack.shortfalls)


def test_json_has_the_box_and_each_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", str(EXAMPLE), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True
    assert data["start_order"] == ["chat", "embed"]
    assert [m["name"] for m in data["models"]] == ["chat", "embed"]
    for m in data["models"]:
        assert m["held_bytes"] == m["total_bytes"] + m["context_bytes"]
        assert m["context_bytes"] == CUDA_CONTEXT_BYTES  # dgx-spark: cuda, unified memory
    total = sum(m["held_bytes"] for m in data["models"]) + data["system_reserve_bytes"]
    assert data["total_bytes"] == total
    for m in data["models"]:
        assert str(m["plan"]["kv_cache_bytes"]) in m["vllm_args"]


def test_table_has_a_section_per_model_and_the_box(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "[chat]" in out and "[embed]" in out
    assert out.count("vllm serve") == 2
    assert "system_reserve (once)" in out and "start order" in out
    assert "FITS — 2 models" in out


BAD = [
    ("models = []\n", "no models"),
    ('hardware = "dgx-spark"\n', "no models"),
    ('hardwar = "dgx-spark"\n' + EMBED, "unknown key 'hardwar'; allowed: hardware"),
    (EMBED + "colour = 1\n", "unknown key 'colour'; allowed: name, role"),
    (EMBED + EMBED, "two models are named 'embed'"),
    (EMBED.replace('"embedding"', '"rerank"'), "role='rerank'; allowed: chat, embedding"),
    (EMBED.replace('name = "embed"\n', ""), "name is missing"),
    (EMBED + "mtp = 2\n", "mtp is not for an embedding model"),
    (EMBED + "memory_share = 0.5\n", "memory_share and kv_cache_memory_bytes both given"),
    (CHAT + CHAT.replace('"chat"', '"chat2"', 1), "at most one model takes the rest"),
    (EMBED.replace("8192", "-1"), "max_model_len=-1"),
    ("hardware = [\n", "not valid TOML"),
    (EMBED + "gpu_memory_utilization = 0.5\n", "unknown key 'gpu_memory_utilization'"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_stack_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    assert main(["plan", "--stack", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("budget: error: stack "), err
    assert message in err


def test_other_settings_beside_stack_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", str(EXAMPLE), "--model", "llama-3.1-8b"]) == 2
    assert "--model is not for it" in capsys.readouterr().err
    assert main(["plan", "--stack", str(EXAMPLE), "--format", "env"]) == 2
    assert "table, json or compose" in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", str(tmp_path / "none.toml")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_shares_over_one_are_refused(tmp_path: Path) -> None:
    text = (
        CHAT
        + "memory_share = 0.7\n"
        + EMBED.replace('kv_cache_memory_bytes = "2G"', "memory_share = 0.5")
    )
    with pytest.raises(BudgetError, match="add up to 1.2"):
        load_stack(_write(tmp_path, text))


def test_a_stack_of_one_model_says_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, 'hardware = "dgx-spark"\n' + CHAT)
    assert main(["plan", "--stack", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"stack     {path}: 1 model\n" in out and "FITS — 1 model on dgx-spark" in out


EMBED_ALONE = ("--model", "qwen3-embedding-0.6b", "--hardware", "dgx-spark")


def test_the_runner_reaches_the_env_output_only_for_pooling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SPARKSERVE_RUNNER is how a stack's embedding model reaches its entrypoint; a chat
    model's env output is as it was."""
    main(["plan", *EMBED_ALONE, "--runner", "pooling", "--format", "env"])
    assert "SPARKSERVE_RUNNER=pooling" in capsys.readouterr().out.splitlines()
    main(["plan", *EMBED_ALONE, "--format", "env"])
    assert "SPARKSERVE_RUNNER" not in capsys.readouterr().out


def test_a_stack_model_takes_its_runner_from_its_role(tmp_path: Path) -> None:
    path = tmp_path / "stack.toml"
    path.write_text(
        EXAMPLE.read_text().replace('role = "embedding"', 'role = "embedding"\nrunner = "generate"')
    )
    assert main(["plan", "--stack", str(path)]) == 2


def test_a_pooling_runner_with_speculation_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default profile drafts with MTP 3; a pooling model generates nothing to draft."""
    assert main(["plan", "--runner", "pooling"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--runner pooling with mtp speculation" in err[0]
    assert main(["plan", "--runner", "pooling", "--mtp", "0", "--format", "argv"]) == 0
    assert "--speculative-config" not in capsys.readouterr().out
