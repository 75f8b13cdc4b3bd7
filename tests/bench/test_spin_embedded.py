"""The calibration class of the embedded gateway (`bench/spin_embedded.py`) and the
overhead bench's `--spin` beside `--embedded-bypass` (the real-vLLM run is in
tests/bench/test_embedded_overhead.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.types import Message, Receive, Scope, Send

from bench.launcher import free_port
from bench.proxies import wait_ready
from bench.spin_embedded import PROBE_PATH, SpinningEmbeddedGateway, spin_of
from gateway.embedded import load_embedded_settings
from gateway.prepare import Preparer
from gateway.proxy import Forward
from tests.bench.overhead_cli import run_overhead
from tests.gateway.test_embedded import Inner, _body, _call, _http, _status, dropped, staying

KEY = "sk-spin"
BODY = b'{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "x"}]}'


class TimedInner(Inner):
    """`Inner` that notes the thread's CPU clock when vLLM's handler is reached."""

    reached: list[int]

    def __init__(self) -> None:
        super().__init__()
        self.reached = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.reached.append(time.thread_time_ns())
        await super().__call__(scope, receive, send)


@pytest.fixture
def inner() -> TimedInner:
    return TimedInner()


@pytest.fixture
def gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inner: TimedInner
) -> SpinningEmbeddedGateway:
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)
    settings = load_embedded_settings(
        api_keys=f"bench:{KEY}", salt_secret="s", state_dir=tmp_path / "state"
    )
    return SpinningEmbeddedGateway(inner, settings, CollectorRegistry())


def _headers(**more: str) -> dict[str, Any]:
    return _http(authorization=f"Bearer {KEY}", **more)


def test_a_request_that_asks_spins_then_is_served_as_embedded(
    gateway: SpinningEmbeddedGateway, inner: TimedInner
) -> None:
    before = time.thread_time_ns()
    sent = _call(gateway, _headers(x_bench_spin_us="5000"), BODY)
    assert inner.reached[0] - before >= 5_000_000  # spun before vLLM's handler ran
    assert _status(sent) == 200 and _body(sent) == b"data: [DONE]\n\n"
    scope, seen = inner.calls[0]
    assert b'"cache_salt"' in seen and b'"include_usage":true' in seen  # the gateway's work
    assert all(name != b"authorization" for name, _ in scope["headers"])


def _probe_all(gateway: SpinningEmbeddedGateway) -> dict[str, Any]:
    sent = _call(gateway, _http(PROBE_PATH, "GET"))
    assert _status(sent) == 200
    answer = json.loads(_body(sent))
    assert answer["spin_header"] == "x-bench-spin-us"
    return dict(answer)


def _probe(gateway: SpinningEmbeddedGateway) -> dict[str, Any]:
    return dict(_probe_all(gateway)["pre_forward_us"])


def test_the_probe_answers_the_work_timed_before_vllms_handler(
    gateway: SpinningEmbeddedGateway, inner: TimedInner, tmp_path: Path
) -> None:
    """Proxied requests through the gateway are timed (not the spin, not bypassed
    ones, not the probe itself, which never reaches vLLM); each probe starts again."""
    assert _probe(gateway) == {"requests": 0, "dropped": 0}
    assert inner.calls == []  # the probe never reaches vLLM
    for _ in range(3):
        _call(gateway, _headers(x_bench_spin_us="20000"), BODY)
    _call(gateway, _http("/health", "GET"), b"")  # not a proxied route
    figures = _probe(gateway)
    assert figures["requests"] == 3 and figures["dropped"] == 0
    assert 0 < figures["p50"] < 20000 and 0 < figures["mean"] < 20000  # the spin is not in it
    assert _probe(gateway)["requests"] == 0
    bypassing = SpinningEmbeddedGateway(
        TimedInner(),
        load_embedded_settings(
            api_keys=f"bench:{KEY}",
            salt_secret="s",
            state_dir=tmp_path / "b",
            embedded_bypass_token="tok",
        ),
        CollectorRegistry(),
    )
    _call(bypassing, _http(x_sparkserve_bypass="tok"), BODY)
    _call(bypassing, _headers(), BODY)
    assert _probe(bypassing)["requests"] == 1


def test_a_request_that_waited_before_vllms_handler_is_not_timed(
    gateway: SpinningEmbeddedGateway, inner: TimedInner
) -> None:
    """Its body came after the loop ran other work, whose CPU the span would hold."""
    pending = [{"type": "http.request", "body": BODY, "more_body": False}]

    async def late_receive() -> Message:
        await asyncio.sleep(0)  # the loop turns: other work may run
        return pending.pop()

    async def send(message: Message) -> None:
        pass

    asyncio.run(gateway(_headers(), late_receive, send))
    assert len(inner.calls) == 1  # served, not timed
    assert _probe(gateway) == {"requests": 0, "dropped": 1}


@pytest.mark.parametrize("raw", ["", "-5", "1.5", "100001", "9999999", "abc"])
def test_a_bad_spin_header_is_refused_with_what_is_allowed(
    gateway: SpinningEmbeddedGateway, inner: TimedInner, raw: str
) -> None:
    sent = _call(gateway, _headers(x_bench_spin_us=raw), BODY)
    assert _status(sent) == 400
    assert b"expected whole microseconds, 0-100000" in _body(sent)
    assert inner.calls == []


def test_spin_of_takes_whole_microseconds_up_to_the_bound() -> None:
    assert [spin_of(v) for v in (b"0", b"100", b"100000")] == [0, 100, 100000]
    assert [spin_of(v) for v in (b"100001", b"", b"+1", b"1e3", b" 5")] == [None] * 5


def test_spin_beside_the_embedded_bypass_needs_the_spinning_class() -> None:
    """Against an upstream that does not run it (the synthetic one answers any path
    with a stream), the bench stops before measuring and says how to start vLLM."""
    port = free_port()
    code = f"import bench.synthetic_sse as s; s.serve({port}, 4, 0.001)"
    upstream = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_ready(f"http://127.0.0.1:{port}", "/health")
        args = ["--vllm-url", f"http://127.0.0.1:{port}", "--embedded-bypass", "t"]
        done = run_overhead(*args, "--spin", "100", "--rounds", "1", "--concurrency", "1")
    finally:
        upstream.terminate()
        upstream.wait(10)
    assert done.returncode != 0, done.stdout
    assert "does not run the spinning embedded gateway" in done.stderr
    assert "--middleware bench.spin_embedded.SpinningEmbeddedGateway" in done.stderr
    assert "Traceback" not in done.stderr and "streams" not in done.stdout


def test_a_request_with_the_turn_off_is_handed_over_at_once_and_timed_apart(
    gateway: SpinningEmbeddedGateway, inner: TimedInner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`x-bench-turn: off` (the bench's `embedded-unturned` path): of two requests
    started in the same turn, the first reaches vLLM's handler before the second is
    prepared, as without `EmbeddedGateway._turn`; with the turn, both are prepared
    first.  Each kind's work before the handover is timed apart."""
    order: list[str] = []
    original = Preparer.prepare

    async def noted(self: Preparer, route: str, scope: Scope, receive: Receive) -> Forward:
        order.append("prepared")
        return await original(self, route, scope, receive)

    monkeypatch.setattr(Preparer, "prepare", noted)
    inner_call = inner.__call__

    async def reached(scope: Scope, receive: Receive, send: Send) -> None:
        order.append("handler")
        await inner_call(scope, receive, send)

    gateway.app = reached

    async def two(**more: str) -> None:
        await asyncio.gather(*(gateway(_headers(**more), staying(BODY), dropped) for _ in "ab"))

    asyncio.run(two(x_bench_turn="off"))
    assert order == ["prepared", "handler", "prepared", "handler"]
    order.clear()
    asyncio.run(two())
    assert order == ["prepared", "prepared", "handler", "handler"]
    answer = _probe_all(gateway)
    assert answer["pre_forward_us"]["requests"] == 2
    assert answer["pre_forward_unturned_us"]["requests"] == 2
