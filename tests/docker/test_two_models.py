"""Two models in one compose project: `make up-cpu STACK=budget/profiles/stacks/cpu-tiny-
chat-embed.toml`, as a user starts it, in its own project and ports (never the shared
stack of tests/docker/conftest.py).

A chat completion on the chat model and an embedding on the embedding model through the
published gateway with the official SDK; each vLLM logs the KV capacity its slice of the
stack plan predicts; the dashboards' model selector lists both models, the host
dashboard has data for each, and so has the serving dashboard (for the embedding model,
every panel but inter-token latency); one model's container killed while the other keeps
serving. One compose up, on the base images the other container tests build (`make
docker-bases`); the file's name puts it after test_stack_teardown.py, once the shared
stack is down, so the two projects never share the two cores.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from budget.cli import main
from entrypoint.logscan import LogWatcher
from tests.docker import stack as st
from tests.integration.dashboards import DASHBOARD_DIR, ROOT, load, queries, variables
from tests.integration.prom import finite_values

pytestmark = pytest.mark.docker

PROJECT = "sparkserve-test-models"
GATEWAY_PORT = 18180
PROMETHEUS_PORT = 19190
STACK = "budget/profiles/stacks/cpu-tiny-chat-embed.toml"
STACK_DIR = "run/test-docker/stack"  # relative to ROOT, as the Makefile names it
EMBED_MODEL_DIR = ROOT / "run" / "tiny-embed-cpu"  # the Makefile's CPU_EMBED_MODEL_DIR


@dataclass(frozen=True)
class Models:
    env: dict[str, str]
    client: openai.OpenAI
    plan: dict[str, Any]  # `python -m budget plan --stack STACK --json`

    def model(self, name: str) -> dict[str, Any]:
        (found,) = [m for m in self.plan["models"] if m["name"] == name]
        return found

    def served(self, name: str) -> str:
        args: list[str] = self.model(name)["vllm_args"]
        return args[args.index("--served-model-name") + 1]


def _stack_plan() -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "--stack", str(ROOT / STACK), "--json"]) == 0
    plan: dict[str, Any] = json.loads(out.getvalue())
    return plan


def _container(name: str) -> str:
    return f"{PROJECT}-vllm-{name}-1"


def _logs(name: str) -> str:
    result = subprocess.run(
        ["docker", "logs", _container(name)], capture_output=True, text=True, timeout=60
    )
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def models() -> Iterator[Models]:
    if not st.engine_answers():
        pytest.skip("no Docker engine answers `docker info` (as root: make docker-engine)")
    key = f"sk-{secrets.token_hex(12)}"
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": PROJECT,
        "GATEWAY_PUBLISH": str(GATEWAY_PORT),
        "PROMETHEUS_PUBLISH": str(PROMETHEUS_PORT),
        "GATEWAY_API_KEYS": f"alice:{key}",
        "STACK": STACK,
        "STACK_DIR": STACK_DIR,
    }
    started = time.monotonic()
    for target in ("docker-bases", "up-cpu"):
        result = st.make(target, env)
        if result.returncode != 0:
            st.make("down", env, "DOWN_ARGS=-v")
            tail = f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            raise AssertionError(f"make {target} STACK={STACK} failed:\n{tail}")
    st.note_timing(f"make up-cpu STACK (chat + embedding): {time.monotonic() - started:.0f} s")
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{GATEWAY_PORT}/v1", api_key=key, max_retries=0
    )
    try:
        yield Models(env, client, _stack_plan())
    finally:
        client.close()  # its pooled connections to the gateway, before the project goes
        st.make("down", env, "DOWN_ARGS=-v")


def test_chat_on_one_model_and_embeddings_on_the_other(models: Models) -> None:
    chat = models.client.chat.completions.create(
        model=models.served("chat"),
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=8,
    )
    assert chat.choices[0].message.content is not None
    assert chat.usage is not None and chat.usage.completion_tokens > 0
    embedded = models.client.embeddings.create(
        model=models.served("embed"), input=["the quick brown fox", "a second sentence"]
    )
    hidden = json.loads((EMBED_MODEL_DIR / "config.json").read_text())["hidden_size"]
    assert [len(d.embedding) for d in embedded.data] == [hidden, hidden]


def test_each_vllm_logs_the_kv_capacity_of_its_slice(models: Models) -> None:
    for name in ("chat", "embed"):
        watcher = LogWatcher()
        text = _logs(name)
        for line in text.splitlines():
            watcher.feed(line)
        seen = watcher.snapshot()
        plan = models.model(name)["plan"]
        assert seen.kv_cache_tokens == plan["kv_cache_tokens"], (name, text[-3000:])
        assert seen.max_concurrency is not None
        assert f"{seen.max_concurrency:.2f}" == f"{plan['max_concurrency']:.2f}", name


PROMETHEUS = f"http://127.0.0.1:{PROMETHEUS_PORT}"
SCRAPES_S = 90.0  # 5 s scrapes: a few after the requests above


def _query(expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{PROMETHEUS}/api/v1/query", params={"query": expr}, timeout=30)
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _selector_values(dashboard: str) -> set[str]:
    """What the dashboard's model selector lists: its `label_values(METRIC, model_name)`."""
    query = variables(load(DASHBOARD_DIR / dashboard))["model_name"]["query"]
    text = query["query"] if isinstance(query, dict) else query
    metric = text.removeprefix("label_values(").split(",")[0].strip()
    response = httpx.get(
        f"{PROMETHEUS}/api/v1/label/model_name/values", params={"match[]": metric}, timeout=30
    )
    return set(response.json()["data"])


def test_the_dashboards_select_each_model_and_have_its_data(models: Models) -> None:
    """The serving and host dashboards' selectors list both models; every non-GPU query of
    the host dashboard has data for each model, from that model's own series."""
    served = {models.served("chat"), models.served("embed")}
    deadline = time.monotonic() + SCRAPES_S
    while time.monotonic() < deadline and not all(
        _selector_values(d) >= served for d in ("serving.json", "host-budget.json")
    ):
        time.sleep(3)
    for dashboard in ("serving.json", "host-budget.json"):
        assert _selector_values(dashboard) >= served, dashboard
    for query in queries(DASHBOARD_DIR / "host-budget.json"):
        if query.gpu_only:
            continue
        for name in sorted(served):
            result = _query(query.substituted(name, "60s"))
            assert finite_values(result), f"No data for {name}: {query.name}"
            labelled = {r["metric"]["model_name"] for r in result if "model_name" in r["metric"]}
            assert labelled <= {name}, (name, query.name, labelled)


def _traffic(models: Models) -> None:
    for _ in range(3):
        models.client.chat.completions.create(
            model=models.served("chat"),
            messages=[{"role": "user", "content": "hello again"}],
            max_tokens=8,
        )
        models.client.embeddings.create(model=models.served("embed"), input=["a sentence"])


def test_the_serving_dashboard_has_data_for_each_model(models: Models) -> None:
    """Every query of the serving dashboard has data for the chat model, from its own
    series; for the embedding model every query but those of `[Generating models]` panels
    (a pooling model generates no tokens: their descriptions say so)."""
    _traffic(models)
    served = {"chat": models.served("chat"), "embed": models.served("embed")}
    finished = 'sum(vllm:request_success_total{model_name="%s"})'
    deadline = time.monotonic() + SCRAPES_S
    while time.monotonic() < deadline and not all(
        finite_values(_query(finished % name)) and _query(finished % name)[0]["value"][1] != "0"
        for name in served.values()
    ):
        time.sleep(3)
    time.sleep(12)  # two more scrapes, so that every rate has two points after the traffic
    missing: dict[str, list[str]] = {}
    for role, name in served.items():
        missing[role] = []
        for query in queries(DASHBOARD_DIR / "serving.json"):
            if role == "embed" and query.generation_only:
                continue
            result = _query(query.substituted(name, "10m"))
            if not finite_values(result):
                missing[role].append(query.name)
                continue
            labelled = {r["metric"]["model_name"] for r in result if "model_name" in r["metric"]}
            assert labelled <= {name}, (name, query.name, labelled)
    assert missing == {"chat": [], "embed": []}


def test_one_model_killed_the_other_keeps_serving(models: Models) -> None:
    """Runs last: the embedding model's container is killed (its restart policy may bring
    it back meanwhile); the chat model answers throughout."""
    killed = subprocess.run(
        ["docker", "kill", _container("embed")], capture_output=True, text=True, timeout=60
    )
    assert killed.returncode == 0, killed.stderr
    for _ in range(5):
        chat = models.client.chat.completions.create(
            model=models.served("chat"),
            messages=[{"role": "user", "content": "still there?"}],
            max_tokens=4,
        )
        assert chat.choices[0].finish_reason in ("stop", "length")
