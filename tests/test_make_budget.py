"""`make budget PLAN_ARGS=…` hands its arguments to the planner (checked with `make -n`,
which prints the recipe without running it, then by running the printed command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_budget_passes_plan_args_to_the_planner() -> None:
    dry = subprocess.run(
        ["make", "-n", "budget", "PLAN_ARGS=--model gpt-oss-120b"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    command = [line for line in dry.stdout.splitlines() if "-m budget plan" in line][-1]
    assert "--format table --model gpt-oss-120b" in command
    ran = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert "gpt-oss-120b (GptOssForCausalLM)" in ran.stdout and "FITS" in ran.stdout
    assert "context 131,072" in ran.stdout


def test_make_budget_plans_a_stack_file() -> None:
    stack = "budget/profiles/stacks/dgx-spark-chat-embed.toml"
    dry = subprocess.run(
        ["make", "-n", "budget", f"STACK={stack}"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    command = [line for line in dry.stdout.splitlines() if "-m budget plan" in line][-1]
    assert f"--format table --stack {stack}" in command
    ran = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert "FITS — 2 models on dgx-spark" in ran.stdout
