"""Two vLLM 0.24 servers on one H100, started by `python -m entrypoint.gpu_check.stack`
in the plan's order (tests/entrypoint/fixtures/gpu_stack_h100/README.md), replayed.

- `before/`: the stack as planned when a model's CUDA context was not counted. The chat
  model took the rest of the box; the embedding model, started second, was refused by
  vLLM's start-up check, 1.11 GiB short.
- `run1/`, `run2/`: the same stack planned with the context counted, two starts: both
  models ready, both answered, each KV pool exactly as planned.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from budget.stack import (
    CUDA_CONTEXT_BYTES,
    RUNTIME_SPREAD_BYTES,
    StackPlan,
    load_stack,
    plan_stack,
)
from budget.units import GiB
from entrypoint.gpu_check.compare import all_within
from entrypoint.gpu_check.stack import compare_logs, vllm_free, with_model_dirs

ROOT = Path(__file__).parents[2]
FIXTURE = Path(__file__).parent / "fixtures" / "gpu_stack_h100"
STACK_FILE = ROOT / "budget/profiles/stacks/h100-chat-embed.toml"
RUNS = ("run1", "run2")
LOG_ROUNDING = 0.005 * GiB  # vLLM prints GiB with 2 decimals
TOTAL = re.compile(r"Free memory on device \S+ \([\d.]+/([\d.]+) GiB\)")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> StackPlan:
    out = tmp_path_factory.mktemp("stack")
    return plan_stack(with_model_dirs(load_stack(STACK_FILE), out))


def _lines(run: str, model: str) -> list[str]:
    return (FIXTURE / run / model / "vllm.log").read_text().splitlines()


def _arg(run: str, model: str, name: str) -> str:
    """A value from vLLM's own `non-default args` line."""
    line = next(line for line in _lines(run, model) if "non-default args:" in line)
    found = re.search(rf"'{name}': ([\d.]+)", line)
    assert found, (name, line[:300])
    return found.group(1)


@pytest.mark.parametrize("run", RUNS)
def test_each_kv_pool_is_what_the_plan_says(stack: StackPlan, run: str) -> None:
    found = compare_logs(stack, FIXTURE / run)
    for m in stack.models:
        figures = {f.name: f for f in found[m.name]}
        assert all_within(found[m.name]), (m.name, found[m.name])
        assert figures["KV cache tokens"].observed == m.plan.kv_cache_tokens
        assert int(_arg(run, m.name, "kv_cache_memory_bytes")) == m.plan.kv_cache_bytes
        assert float(_arg(run, m.name, "gpu_memory_utilization")) == m.plan.start_utilization


@pytest.mark.parametrize("run", RUNS)
def test_every_start_check_passed_as_planned(stack: StackPlan, run: str) -> None:
    """vLLM's check (v1/worker/utils.py `request_memory`): what it logged free at each
    start covers ceil(total × utilization); the plan's free is within the runtime's
    spread of it (the chat model holds a little more than planned)."""
    report = json.loads((FIXTURE / run / "report.json").read_text())
    assert report["passed"] is True and report["start_order"] == stack.start_order
    for check in stack.start_checks:
        free = vllm_free(_lines(run, check.name))
        assert free is not None
        assert free >= check.request_bytes + LOG_ROUNDING
        assert abs(check.free_bytes - free) <= RUNTIME_SPREAD_BYTES
    assert all(m["request_status"] == 200 for m in report["models"])


def test_the_context_is_what_vllm_saw_missing_on_an_empty_gpu() -> None:
    """The first model starts on an empty GPU: total less its initial free memory is the
    CUDA context it holds before the check, the constant the plan counts."""
    total = next(
        float(m.group(1)) for line in _lines("before", "embed") if (m := TOTAL.search(line))
    )
    for run in ("before", *RUNS):
        free = vllm_free(_lines(run, "chat"))
        assert free is not None
        assert abs(total * GiB - free - CUDA_CONTEXT_BYTES) <= 2 * LOG_ROUNDING


def test_without_the_context_the_plan_missed_the_refusal_it_now_predicts(
    stack: StackPlan,
) -> None:
    """`before/`: the chat pool the old arithmetic gave, with today's planner. It now
    says the embedding model's start fails, within the runtime's spread of the free
    memory vLLM measured when it refused it."""
    logged_pool = int(_arg("before", "chat", "kv_cache_memory_bytes"))
    given = load_stack(STACK_FILE)
    chat = given.models[0]
    fixed = replace(chat, options=replace(chat.options, kv_cache_memory_bytes=logged_pool))
    old = plan_stack(replace(stack.stack, models=(fixed, *stack.stack.models[1:])))
    embed = next(c for c in old.start_checks if c.name == "embed")
    assert not embed.passes
    assert not old.fits and any(
        line.startswith("embed: vLLM's start-up check") for line in old.shortfalls
    )
    refused = next(line for line in _lines("before", "embed") if "less than desired" in line)
    seen = vllm_free([refused])
    assert seen is not None
    assert abs(embed.free_bytes - seen) <= RUNTIME_SPREAD_BYTES
    # vLLM's request in that line is the one the plan makes.
    asked = float(re.search(r"utilization \([\d.]+, ([\d.]+) GiB\)", refused).group(1))  # type: ignore[union-attr]
    assert abs(asked * GiB - embed.request_bytes) <= LOG_ROUNDING
    report = json.loads((FIXTURE / "before" / "report.json").read_text())
    assert [m["state"] for m in report["models"]] == ["ready", "exited"]


def test_the_embedding_model_held_less_than_its_plan(stack: StackPlan) -> None:
    """NVML's used memory at each ready less before each start, against today's plan:
    the chat model held its plan and context and a little more, within the runtime's
    spread; the embedding model held less than its plan."""
    planned = {m.name: m.held_bytes for m in stack.models}
    for run in RUNS:
        held = {
            m["name"]: m["held_bytes"]
            for m in json.loads((FIXTURE / run / "report.json").read_text())["models"]
        }
        assert 0 <= held["chat"] - planned["chat"] <= RUNTIME_SPREAD_BYTES
        assert held["embed"] < planned["embed"]
