"""`make up-cpu` for real: the images build here, every service turns healthy, the official
SDK streams through the gateway, the stack's own Prometheus has data for the dashboards,
nothing runs as root or leaks a secret, and `down -v` leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.docker import stack as st
from tests.integration import traffic
from tests.integration.dashboards import DASHBOARD_DIR, queries
from tests.integration.prom import finite_values

pytestmark = pytest.mark.docker

NON_GPU_DASHBOARDS = ("serving", "gateway", "host-budget")
SERVICES = {"vllm", "gateway", "prometheus"}
SCRAPE_WAIT_S = 90.0


@pytest.fixture(scope="module")
def stack() -> Iterator[st.Stack]:
    if not st.engine_answers():
        pytest.skip("no Docker engine answers `docker info` (as root: make docker-engine)")
    yield from st.up()


@pytest.fixture(scope="module")
def client(stack: st.Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway}/v1", api_key=stack.key, max_retries=0)


def test_every_service_is_healthy(stack: st.Stack) -> None:
    states = {c["Service"]: (c["State"], c["Health"]) for c in st.containers(stack.env)}
    assert set(states) == SERVICES, states
    assert all(state == ("running", "healthy") for state in states.values()), states


def test_models_chat_and_streamed_chat_through_the_gateway(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [st.SERVED_MODEL]
    messages = [{"role": "user", "content": "Say something about caches."}]
    reply = client.chat.completions.create(model=st.SERVED_MODEL, messages=messages, max_tokens=8)
    assert reply.choices[0].message.content and reply.usage and reply.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model=st.SERVED_MODEL, messages=messages, max_tokens=8, stream=True
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert len(pieces) >= 2 and "".join(pieces)


def test_no_key_is_refused(stack: st.Stack) -> None:
    assert httpx.get(f"{stack.gateway}/v1/models", timeout=30).status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{stack.gateway}/v1", api_key="sk-wrong").models.list()


@pytest.fixture(scope="module")
def scraped(stack: st.Stack) -> float:
    """Traffic through the published gateway, then time for a few scrapes; returns the
    seconds since the traffic began (the window the queries use)."""
    started = time.time()
    keys = (stack.key, f"{stack.key}-bob")
    statuses = traffic.through_gateway(stack.gateway, keys)
    assert statuses["session"] == [200] * 4 and statuses["bad_key"] == [401], statuses
    assert 429 in statuses["burst"], statuses
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while time.monotonic() < deadline and not _targets_up(stack):
        time.sleep(2)
    time.sleep(12)  # a few 5 s scrapes after the traffic, and rule evaluations
    return time.time() - started


def _targets(stack: st.Stack) -> list[dict[str, object]]:
    response = httpx.get(f"{stack.prometheus}/api/v1/targets", timeout=30)
    return list(response.json()["data"]["activeTargets"])


def _targets_up(stack: st.Stack) -> bool:
    targets = _targets(stack)
    return bool(targets) and all(t["health"] == "up" for t in targets)


def test_every_scrape_target_is_up(stack: st.Stack, scraped: float) -> None:
    jobs = {str(t["labels"]["job"]): t["health"] for t in _targets(stack)}  # type: ignore[index]
    assert jobs == {"vllm": "up", "entrypoint": "up", "gateway": "up"}


QUERIES = [
    pytest.param(q, id=q.name)
    for name in NON_GPU_DASHBOARDS
    for q in queries(DASHBOARD_DIR / f"{name}.json")
    if not q.gpu_only
]


@pytest.mark.parametrize("query", QUERIES)
def test_dashboard_query_returns_data(stack: st.Stack, scraped: float, query) -> None:
    expr = query.substituted(st.SERVED_MODEL, f"{int(scraped) + 30}s")
    response = httpx.get(f"{stack.prometheus}/api/v1/query", params={"query": expr}, timeout=30)
    result = response.json()["data"]["result"]
    assert finite_values(result), f"No data: {expr} → {json.dumps(result)}"


def _inspect(stack: st.Stack) -> list[dict[str, object]]:
    ids = st.project_objects("container")
    out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, timeout=60)
    return list(json.loads(out.stdout))


def test_every_container_runs_as_a_non_root_uid(stack: st.Stack) -> None:
    for container in st.containers(stack.env):
        uid = st.compose(stack.env, "exec", "-T", container["Service"], "id", "-u").stdout
        assert uid.strip().isdigit() and int(uid) != 0, (container["Service"], uid)


@pytest.mark.parametrize("service", ["vllm", "gateway"])
def test_every_shipped_command_answers_help_in_the_images(stack: st.Stack, service: str) -> None:
    for command in ("budget plan", "entrypoint", "gateway", "bench", "reliability"):
        argv = ["exec", "-T", "-w", "/", service, "python3", "-m", *command.split(), "--help"]
        result = st.compose(stack.env, *argv)
        assert result.returncode == 0 and "usage:" in result.stdout, (command, result.stderr)


def test_the_model_is_mounted_read_only(stack: st.Stack) -> None:
    (vllm,) = [
        c for c in _inspect(stack) if c["Config"]["Labels"]["com.docker.compose.service"] == "vllm"
    ]  # type: ignore[index]
    (model,) = [m for m in vllm["Mounts"] if m["Destination"] == "/models"]  # type: ignore[union-attr, index]
    assert model["RW"] is False


def test_no_key_or_salt_in_inspect_or_any_log(stack: st.Stack, scraped: float) -> None:
    salt = st.compose(
        stack.env, "exec", "-T", "gateway", "cat", "/var/lib/sparkserve-gateway/salt_secret"
    ).stdout.strip()
    assert len(salt) >= 16  # the gateway generated and kept one
    inspected = json.dumps(_inspect(stack))
    logs = st.compose(stack.env, "logs", "--no-color").stdout
    assert logs, "no logs to search"
    for secret in (stack.key, f"{stack.key}-bob", salt):
        assert secret not in inspected
        assert secret not in logs


def test_down_leaves_no_container_network_or_volume(stack: st.Stack) -> None:
    result = st.make("down", stack.env, "DOWN_ARGS=-v")
    assert result.returncode == 0, result.stderr
    for kind in ("container", "network", "volume"):
        assert st.project_objects(kind) == [], kind
