"""The proxy against a synthetic vLLM over real sockets: streams, headers, salts, usage."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.standalone.app import create_app
from tests.gateway.conftest import ALICE_KEY, BOB_KEY, MakeSettings, auth
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def gateway_url(
    fake_vllm: tuple[FakeVLLM, str],
    make_settings: MakeSettings,
    registry: CollectorRegistry,
) -> Iterator[str]:
    """The gateway served as `python -m gateway` serves it."""
    app = create_app(make_settings(fake_vllm[1]), registry=registry)
    with serve(app) as url:
        yield url


def _data_events(text: str) -> list[str]:
    return [e for e in text.split("\n\n") if e.startswith("data:")]


def test_stream_is_forwarded_event_by_event_without_injected_usage(
    fake_vllm: tuple[FakeVLLM, str], gateway_url: str
) -> None:
    body = {**CHAT, "stream": True}
    response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=auth())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-upstream"] == "yes"
    events = _data_events(response.text)
    assert events[-1] == "data: [DONE]"
    assert [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:-1]] == [
        "t0",
        "t1",
        "t2",
    ]
    sent = fake_vllm[0].requests[-1]
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}


def test_usage_chunk_kept_when_client_asked(gateway_url: str) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=auth())
    payloads = [json.loads(e[6:]) for e in _data_events(response.text)[:-1]]
    assert payloads[-1]["choices"] == []
    assert payloads[-1]["usage"]["prompt_tokens"] == 300


def test_tokens_counted_per_tenant(gateway_url: str, registry: CollectorRegistry) -> None:
    httpx.post(f"{gateway_url}/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth())
    httpx.post(f"{gateway_url}/v1/chat/completions", json=CHAT, headers=auth(BOB_KEY))
    for tenant in ("alice", "bob"):
        labels = {"tenant": tenant}
        assert registry.get_sample_value("gateway_prompt_tokens_total", labels) == 300
        assert registry.get_sample_value("gateway_completion_tokens_total", labels) == 3
        assert registry.get_sample_value("gateway_cached_prompt_tokens_total", labels) == 256
    assert registry.get_sample_value("gateway_ttft_seconds_count") == 1
    assert registry.get_sample_value("gateway_inter_token_latency_seconds_count") == 2
    assert registry.get_sample_value("gateway_e2e_latency_seconds_count") == 2
    ok = {"route": "/v1/chat/completions", "status_class": "2xx"}
    assert registry.get_sample_value("gateway_requests_total", ok) == 2


def test_first_event_arrives_before_upstream_finishes(
    fake_vllm: tuple[FakeVLLM, str], gateway_url: str
) -> None:
    fake = fake_vllm[0]
    fake.hold = True
    body = {**CHAT, "stream": True}
    with httpx.stream(
        "POST", f"{gateway_url}/v1/chat/completions", json=body, headers=auth()
    ) as response:
        lines = response.iter_lines()
        first = next(lines)
        assert first.startswith("data: ") and "t0" in first
        assert not fake.release.is_set()  # the upstream is still holding the stream open
        fake.release.set()
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"


def test_client_disconnect_closes_upstream(
    fake_vllm: tuple[FakeVLLM, str], gateway_url: str, registry: CollectorRegistry
) -> None:
    fake = fake_vllm[0]
    fake.hold = True
    with httpx.stream(
        "POST",
        f"{gateway_url}/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers=auth(),
    ) as response:
        next(response.iter_lines())
    assert fake.disconnected.wait(5), "upstream stream was not closed"
    deadline = time.monotonic() + 5
    while registry.get_sample_value("gateway_in_flight") != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert registry.get_sample_value("gateway_in_flight") == 0


def test_salt_layout_and_auth_headers_upstream(
    fake_vllm: tuple[FakeVLLM, str], gateway_url: str
) -> None:
    response = httpx.post(f"{gateway_url}/v1/chat/completions", json=CHAT, headers=auth())
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hello"
    assert response.headers["x-sparkserve-layout"] == "unchanged"
    sent, headers = fake_vllm[0].requests[-1], fake_vllm[0].headers[-1]
    assert len(sent["cache_salt"]) == 64
    assert ALICE_KEY not in json.dumps(headers) and "authorization" not in headers


def test_upstream_status_and_body_pass_through(gateway_url: str) -> None:
    body = {**CHAT, "model": "missing", "stream": True}
    response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=auth())
    assert response.status_code == 404
    assert "does not exist" in response.json()["error"]["message"]


def test_models_tokenize_and_embeddings_pass_through(
    fake_vllm: tuple[FakeVLLM, str], gateway_url: str
) -> None:
    models = httpx.get(f"{gateway_url}/v1/models", headers=auth())
    assert models.json()["data"][0]["id"] == "tiny"
    tokenize = httpx.post(f"{gateway_url}/tokenize", json={"prompt": "x"}, headers=auth())
    assert tokenize.json() == {"echo": {"prompt": "x"}}
    embed = httpx.post(f"{gateway_url}/v1/embeddings", json={"input": "x"}, headers=auth())
    assert "cache_salt" in embed.json()["echo"]


def test_a_sessions_divergence_is_noted_once_the_request_is_through(
    fake_vllm: tuple[FakeVLLM, str], gateway_url: str, registry: CollectorRegistry
) -> None:
    """The next request of a chat session with another system prompt counts `system`, but
    only after its response: the forward never waits for the divergence hashes."""
    fake = fake_vllm[0]
    url, session = f"{gateway_url}/v1/chat/completions", {"x-session-id": "s1", **auth()}
    system = "segment"

    def chat(prompt: str) -> dict[str, object]:
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}]
        return {**CHAT, "messages": messages, "stream": True}

    def noted() -> float | None:
        return registry.get_sample_value("gateway_prefix_divergence_total", {system: "system"})

    assert httpx.post(url, json=chat("You are A."), headers=session).status_code == 200
    fake.hold = True
    with httpx.stream("POST", url, json=chat("You are B."), headers=session) as response:
        lines = response.iter_lines()
        first = next(lines)
        assert first.startswith("data: ") and "t0" in first
        assert noted() is None  # mid-stream: not yet
        fake.release.set()
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    deadline = time.monotonic() + 5
    while noted() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert noted() == 1
