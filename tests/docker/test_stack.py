"""`make up-cpu` for real: the images build here, every service turns healthy, the official
SDK streams through the gateway, the stack's own Prometheus has data for the dashboards,
nothing runs as root or leaks a secret, and `down -v` leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import threading
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


# Faults made inside the vLLM container with psutil (in the image: the entrypoint's
# dependency): vLLM's API server (the entrypoint's child) killed, or its engine stopped.
FAULTS = {
    "vLLM's main process killed (SIGKILL)": ("main", "kill", "vLLM exited (killed by SIGKILL"),
}
# `main`: the entrypoint's children (vLLM's API server); else processes named so.
FAULT = (
    "import os, psutil, sys\n"
    "procs = [p for p in psutil.process_iter(['name', 'cmdline']) if p.pid != os.getpid()]\n"
    "def text(p): return (p.info['name'] or '') + ' ' + ' '.join(p.info['cmdline'] or [])\n"
    "if sys.argv[1] == 'main':\n"
    "    (entry,) = [p for p in procs if '-m entrypoint' in text(p)]\n"
    "    found = entry.children()\n"
    "else:\n"
    "    found = [p for p in procs if sys.argv[1] in text(p)]\n"
    "[getattr(p, sys.argv[2])() for p in found]\n"
    "print(len(found))\n"
)


def _restart_count(stack: st.Stack, service: str = "vllm") -> int:
    (container,) = [c for c in st.containers(stack.env) if c["Service"] == service]
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.RestartCount}}", container["ID"]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return int(out.stdout.strip())


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_vllm_fault_restarts_its_container_and_the_gateway_serves_again(
    stack: st.Stack, client: openai.OpenAI, scraped: float, fault: str
) -> None:
    """The entrypoint exits 3 (vLLM gone), the restart policy brings the container back,
    and meanwhile the gateway answers 503 with Retry-After; the gateway itself is not
    restarted."""
    target, action, said = FAULTS[fault]
    before = _restart_count(stack)
    gateway_before = _restart_count(stack, "gateway")
    made = st.compose(stack.env, "exec", "-T", "vllm", "python3", "-c", FAULT, target, action)
    assert made.returncode == 0 and int(made.stdout.strip() or 0) >= 1, made
    started = time.monotonic()
    quick = client.with_options(timeout=5.0, max_retries=0)
    refusals: list[tuple[int, str | None]] = []
    answered = None
    while time.monotonic() - started < st.UP_TIMEOUT_S:
        try:
            quick.chat.completions.create(
                model=st.SERVED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            if _restart_count(stack) > before:
                answered = time.monotonic() - started
                break
        except openai.APIStatusError as exc:
            refusals.append((exc.status_code, exc.response.headers.get("retry-after")))
        except (openai.APIConnectionError, openai.APITimeoutError):
            pass  # a stopped engine's requests hang until the client gives up
        time.sleep(1.0)
    logs = st.compose(stack.env, "logs", "--no-color", "vllm").stdout
    assert answered is not None, logs[-4000:]
    assert _restart_count(stack) == before + 1
    assert said in logs, logs[-4000:]
    unavailable = [retry for status, retry in refusals if status == 503]
    assert unavailable, refusals
    assert all(retry is not None and int(retry) >= 0 for retry in unavailable), refusals
    assert _restart_count(stack, "gateway") == gateway_before
    st.note_timing(
        f"{fault} -> first good answer from the restarted container: {answered:.0f} s"
        f" ({len(unavailable)} 503s with Retry-After meanwhile)"
    )


def test_a_gateway_restart_ends_streams_cleanly_and_serving_resumes(
    stack: st.Stack, client: openai.OpenAI, scraped: float
) -> None:
    """`docker compose restart gateway` under streams: each stream ends (the connection
    closes) with every event it got whole and well-formed; then the gateway serves."""
    events: list[str] = []
    ended: list[str] = []

    def stream() -> None:
        body = {
            "model": st.SERVED_MODEL,
            "messages": [{"role": "user", "content": "count"}],
            "max_tokens": 1000,
            "ignore_eos": True,
            "stream": True,
        }
        headers = {"Authorization": f"Bearer {stack.key}"}
        try:
            with httpx.stream(
                "POST", f"{stack.gateway}/v1/chat/completions", json=body, headers=headers,
                timeout=120,
            ) as answer:  # fmt: skip
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        events.append(line.removeprefix("data: "))
            ended.append("complete")
        except httpx.HTTPError as exc:
            ended.append(type(exc).__name__)

    st_client = client.with_options(timeout=30.0, max_retries=0)
    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not events and time.monotonic() < deadline:
        time.sleep(0.2)
    assert events, "no event before the restart"
    restarted = st.compose(stack.env, "restart", "gateway")
    assert restarted.returncode == 0, restarted.stderr
    thread.join(120)
    assert ended, "the stream did not end"
    if ended[0] == "complete":  # the gateway let it finish before stopping
        assert events[-1] == "[DONE]", events[-3:]
    st.note_timing(
        f"gateway restarted under a stream: it ended {ended[0]} after {len(events)} events"
    )
    for data in events:
        if data != "[DONE]":
            assert json.loads(data)["object"] == "chat.completion.chunk", data
    deadline = time.monotonic() + 120
    while True:
        try:
            reply = st_client.chat.completions.create(
                model=st.SERVED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            break
        except (openai.APIConnectionError, openai.APIStatusError):
            assert time.monotonic() < deadline, "the gateway did not serve again"
            time.sleep(1.0)
    assert reply.choices[0].message.content is not None


def test_down_leaves_no_container_network_or_volume(stack: st.Stack) -> None:
    result = st.make("down", stack.env, "DOWN_ARGS=-v")
    assert result.returncode == 0, result.stderr
    for kind in ("container", "network", "volume"):
        assert st.project_objects(kind) == [], kind
