"""`make up-cpu` for real: the images build here, every service turns healthy, the official
SDK streams through the gateway, the stack's own Prometheus has data for the dashboards,
nothing runs as root or leaks a secret, and `down -v` leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

import httpx
import openai
import pytest

from tests.docker import faults
from tests.docker import stack as st
from tests.integration import traffic
from tests.integration.dashboards import DASHBOARD_DIR, queries
from tests.integration.prom import finite_values

pytestmark = pytest.mark.docker

NON_GPU_DASHBOARDS = ("serving", "gateway", "host-budget")
SERVICES = {"vllm", "gateway", "prometheus"}
SCRAPE_WAIT_S = 90.0


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
    assert 429 in statuses["burst"], (statuses, _admission_evidence(stack))
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while time.monotonic() < deadline and not _targets_up(stack):
        time.sleep(2)
    time.sleep(12)  # a few 5 s scrapes after the traffic, and rule evaluations
    return time.time() - started


def _admission_evidence(stack: st.Stack) -> dict[str, object]:
    """What the gateway ran with and counted, for a burst that was not refused."""
    env = st.compose(stack.env, "exec", "-T", "gateway", "env").stdout
    metrics = httpx.get(f"{stack.gateway}/metrics", timeout=30).text
    return {
        "env": [line for line in env.splitlines() if line.startswith("GATEWAY_")],
        "metrics": [
            line
            for line in metrics.splitlines()
            if line.startswith(("gateway_rejected_total", "gateway_queue_wait_seconds_count"))
        ],
    }


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


SHIPPED_COMMANDS = ("budget plan", "entrypoint", "entrypoint.gpu_check", "gateway", "draftvocab")
# The checkout's own packages that the images leave out (tests/integration/test_deploy.py
# checks the Dockerfile and .dockerignore; this checks the built images).
NOT_SHIPPED = ("bench", "reliability", "devtools", "tools", "tests")
SOURCE_DIR = "/opt/sparkserve"


@pytest.mark.parametrize("service", ["vllm", "gateway"])
def test_every_shipped_command_answers_help_in_the_images(stack: st.Stack, service: str) -> None:
    for command in SHIPPED_COMMANDS:
        argv = ["exec", "-T", "-w", "/", service, "python3", "-m", *command.split(), "--help"]
        result = st.compose(stack.env, *argv)
        assert result.returncode == 0 and "usage:" in result.stdout, (command, result.stderr)


@pytest.mark.parametrize("service", ["vllm", "gateway"])
def test_the_images_hold_no_development_package(stack: st.Stack, service: str) -> None:
    """bench, reliability and devtools are not importable in the images (from / and from
    the source directory), and the source directory holds none of the checkout's others."""
    script = (
        "import importlib.util, json, os, sys; "
        f"names = {NOT_SHIPPED[:3]!r}; "
        "found = {n: str(importlib.util.find_spec(n).origin) for n in names "
        "if importlib.util.find_spec(n) is not None}; "
        f"left = sorted(set(os.listdir({SOURCE_DIR!r})) & set({NOT_SHIPPED!r})); "
        "print(json.dumps({'importable': found, 'copied': left}))"
    )
    for workdir in ("/", SOURCE_DIR):
        argv = ["exec", "-T", "-w", workdir, service, "python3", "-c", script]
        result = st.compose(stack.env, *argv)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"importable": {}, "copied": []}, (workdir, service)


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


@dataclass(frozen=True)
class Fault:
    target: str  # faults.SCRIPT's first argument
    action: str  # a psutil.Process method, or with under_stream a signal for `kill`
    said: str  # what the entrypoint's log must say
    under_stream: bool  # made while a stream runs (a stalled engine has requests admitted)


FAULTS = {
    "vLLM's main process killed (SIGKILL)": Fault(
        "main", "kill", "vLLM exited (killed by SIGKILL", under_stream=False
    ),
    "vLLM's engine stopped mid-stream (SIGSTOP)": Fault(
        "EngineCore", "STOP", "vLLM's engine made no progress for", under_stream=True
    ),
}


STREAM_FAULT_DELAY_S = 1.0


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_vllm_fault_restarts_its_container_and_the_gateway_serves_again(
    stack: st.Stack, client: openai.OpenAI, scraped: float, name: str
) -> None:
    """The entrypoint exits 3 (vLLM gone, or its engine stalled:
    SPARKSERVE_STALL_TIMEOUT_S in the tests' env file), the restart policy brings the
    container back, and meanwhile the gateway answers 503 with Retry-After; the gateway
    itself is not restarted. `make doctor` reports the container not ok while it
    restarts, then ok with one more restart and the entrypoint's line among its errors."""
    fault = FAULTS[name]
    before = faults.restart_count(stack.env)
    gateway_before = faults.restart_count(stack.env, "gateway")
    if fault.under_stream:  # a 4,000-token stream lasts about 5 s: stopped 1 s into it
        pids = faults.find(stack.env, fault.target)
        faults.send_later(stack.env, fault.action, pids, STREAM_FAULT_DELAY_S)
        stream = faults.Stream(stack.gateway, stack.key, 4000)
        stream.wait_for_events()
    else:
        stream = None
        faults.make_fault(stack.env, fault.target, fault.action)
    started = time.monotonic()
    quick = client.with_options(timeout=5.0, max_retries=0)
    refusals: list[tuple[int, str | None]] = []
    not_ok: list[faults.DoctorReport] = []
    answered = None
    while time.monotonic() - started < st.UP_TIMEOUT_S:
        if not not_ok and (report := faults.doctor()).code != 0:
            not_ok.append(report)
        try:
            quick.chat.completions.create(
                model=st.SERVED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            if faults.restart_count(stack.env) > before:
                answered = time.monotonic() - started
                break
        except openai.APIStatusError as exc:
            refusals.append((exc.status_code, exc.response.headers.get("retry-after")))
        except (openai.APIConnectionError, openai.APITimeoutError):
            pass  # a stopped engine's requests hang until the client gives up
        time.sleep(1.0)
    logs = st.compose(stack.env, "logs", "--no-color", "vllm").stdout
    assert answered is not None, logs[-4000:]
    assert faults.restart_count(stack.env) == before + 1
    assert fault.said in logs, logs[-4000:]
    unavailable = [retry for status, retry in refusals if status == 503]
    assert unavailable, refusals
    assert all(retry is not None and int(retry) >= 0 for retry in unavailable), refusals
    assert faults.restart_count(stack.env, "gateway") == gateway_before
    _doctor_saw_it(not_ok, before + 1, fault.said)
    ended = ""
    if stream is not None:
        stream.thread.join(60)
        assert stream.ended, "the stream did not end"
        *_, last = stream.chunks()  # every event it got is whole
        assert "error" in last, stream.events[-3:]  # the gateway said why it ended
        ended = f"; the stream ended ({stream.ended[0]}) after {len(stream.events)} events"
    st.note_timing(
        f"{name} -> first good answer from the restarted container: {answered:.0f} s"
        f" ({len(unavailable)} 503s with Retry-After meanwhile{ended})"
    )


def _doctor_saw_it(not_ok: list[faults.DoctorReport], restarts: int, said: str) -> None:
    assert not_ok, "make doctor never reported the faulty container"
    (seen,) = not_ok
    assert seen.code == 1 and seen.text.rstrip().endswith("not ok: vllm"), seen.text
    deadline = time.monotonic() + 60  # Docker's next healthcheck marks it healthy again
    while (report := faults.doctor()).code != 0:
        assert time.monotonic() < deadline, report.text
        time.sleep(2)
    service, state, health, count, *_ = report.row(f"{st.PROJECT}-vllm-1")
    assert (service, state, health, int(count)) == ("vllm", "running", "healthy", restarts)
    assert any(said in line for line in report.error_lines("vllm")), report.text


def test_a_gateway_restart_ends_streams_cleanly_and_serving_resumes(
    stack: st.Stack, client: openai.OpenAI, scraped: float
) -> None:
    """`docker compose restart gateway` under streams: each stream ends (the connection
    closes) with every event it got whole and well-formed; then the gateway serves."""
    stream = faults.Stream(stack.gateway, stack.key, 1000)
    stream.wait_for_events()
    restarted = st.compose(stack.env, "restart", "gateway")
    assert restarted.returncode == 0, restarted.stderr
    stream.thread.join(120)
    assert stream.ended, "the stream did not end"
    if stream.ended[0] == "complete":  # the gateway let it finish before stopping
        assert stream.events[-1] == "[DONE]", stream.events[-3:]
    st.note_timing(
        f"gateway restarted under a stream: it ended {stream.ended[0]} "
        f"after {len(stream.events)} events"
    )
    for chunk in stream.chunks():
        assert chunk["object"] == "chat.completion.chunk", chunk
    st_client = client.with_options(timeout=30.0, max_retries=0)
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
