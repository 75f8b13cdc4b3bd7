"""The embedded gateway's relay (gateway/embedded/relay.py): its hot path, a token event's
timing inlined from `StreamObserver.observe`, gives the figures `observe` gives."""

from __future__ import annotations

import time
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.types import Message

from gateway.core.forward import Forward
from gateway.core.metrics import GatewayMetrics
from gateway.core.routes import RequestCount
from gateway.core.sse import StreamObserver
from gateway.core.tenancy import Principal
from gateway.embedded.relay import Relay

CHAT = "/v1/chat/completions"
SSE = [(b"content-type", b"text/event-stream; charset=utf-8")]
TOKENS = [b'data: {"choices":[{"index":0,"delta":{"content":"%d"}}]}\n\n' % i for i in range(4)]
USAGE = (
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}\n\n'
)
DONE = b"data: [DONE]\n\n"
# When each event arrives: the gaps differ, so a gap taken from the wrong event shows.
CLOCK = [100.0, 100.5, 101.25, 103.0, 104.0, 104.5]


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never waits (the relay, into a `send` that does not)."""
    with pytest.raises(StopIteration):
        coroutine.send(None)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """`time.monotonic` reads the next of CLOCK each time (the relay's and the
    observer's both), and the test sees what is left."""
    left = list(CLOCK)
    monkeypatch.setattr(time, "monotonic", lambda: left.pop(0))
    yield left


def test_the_hot_path_times_token_events_as_observe_does(clock: list[float]) -> None:
    registry = CollectorRegistry()
    metrics = GatewayMetrics.create(registry)
    forward = Forward(
        "POST",
        CHAT,
        Principal("alice", "a"),
        [],
        body=b"{}",
        stream=True,
        drop_usage=True,
        generation=True,
        started=99.0,
    )
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    relay = Relay(metrics, forward, RequestCount(metrics, CHAT), send)
    _run(relay({"type": "http.response.start", "status": 200, "headers": SSE}))
    for event in [*TOKENS, USAGE, DONE]:
        _run(relay({"type": "http.response.body", "body": event, "more_body": True}))
    _run(relay({"type": "http.response.body", "body": b"", "more_body": False}))
    through_relay = [m["body"] for m in sent[1:]]

    # The same events, each read at the same time, through `observe` alone.
    clock[:] = list(CLOCK)
    gaps: list[float] = []
    observer = StreamObserver(True, gaps.append, lambda n: gaps.extend([0.0] * n))
    forwarded = [event for event in [*TOKENS, USAGE, DONE] if observer.observe(event)]

    assert through_relay == [*forwarded, b""] == [*TOKENS, DONE, b""]  # the usage chunk dropped
    assert gaps == [0.5, 0.75, 1.75]
    assert registry.get_sample_value("gateway_inter_token_latency_seconds_count") == len(gaps)
    assert registry.get_sample_value("gateway_inter_token_latency_seconds_sum") == sum(gaps)
    # The first token event came at 100.0, 1 s after the request started.
    assert observer.first_event_at == 100.0
    assert registry.get_sample_value("gateway_ttft_seconds_sum") == 1.0
    alice = {"tenant": "alice"}
    assert registry.get_sample_value("gateway_completion_tokens_total", alice) == 4
