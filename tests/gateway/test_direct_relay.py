"""The direct path of the event relay: under the front, a chunk of whole plain token
events is written to the client from the upstream read callback (gateway/proxy.py
`_relay_events`).  Checked here over real sockets against a scripted vLLM stand-in
whose every write arrives as its own read: order kept whichever path each chunk
takes, a client that stops reading, the read timeout, and a pooled connection."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import create_app
from gateway.front import Front
from gateway.h1client import HttptoolsUpstream
from gateway.metrics import GatewayMetrics
from gateway.proxy import Forward, ProxyDeps, ProxyResponse
from gateway.tenancy import Principal
from tests.gateway.conftest import MakeSettings, auth
from tests.gateway.server import RawServer, serve

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
DONE = b"data: [DONE]\n\n"
STREAM = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def event(i: int, pad: int = 0) -> bytes:
    delta = {"content": f"t{i}" + "x" * pad}
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


def usage_event() -> bytes:
    usage = {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
    return b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class Scripted(RawServer):
    """Answers each POST with the next script: a list of (bytes to write, seconds to
    wait after), and anything else (the gateway's probes) with an empty 200.
    Keep-alive, as vLLM's uvicorn."""

    def __init__(self, scripts: list[list[tuple[bytes, float]]]) -> None:
        super().__init__(self.handle)
        self.scripts = scripts

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while self.scripts:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            fields = dict(
                line.split(b":", 1) for line in head.lower().split(b"\r\n")[1:] if b":" in line
            )
            await reader.readexactly(int(fields.get(b"content-length", b"0")))
            if not head.startswith(b"POST"):  # the gateway's health probes
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            for data, pause in self.scripts.pop(0):
                writer.write(data)
                await writer.drain()
                await asyncio.sleep(pause)


async def _stop(server: RawServer) -> None:
    await server.close()
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@contextmanager
def upstream(scripts: list[list[tuple[bytes, float]]]) -> Iterator[str]:
    """The scripted server on its own event loop thread; its base URL."""
    loop = asyncio.new_event_loop()
    server = Scripted(scripts)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
    finally:
        asyncio.run_coroutine_threadsafe(_stop(server), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@contextmanager
def gateway(make_settings: MakeSettings, url: str, **settings: Any) -> Iterator[str]:
    app = create_app(make_settings(url, **settings), registry=CollectorRegistry())
    with serve(app, front=True) as gateway_url:
        yield gateway_url


@pytest.fixture
def direct_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every chunk the front wrote from the read callback."""
    taken: list[bytes] = []
    original = Front.write_chunk

    def spy(self: Front, body: bytes) -> bool:
        ok = original(self, body)
        if ok:
            taken.append(body)
        return ok

    monkeypatch.setattr(Front, "write_chunk", spy)
    return taken


def data_lines(body: bytes) -> list[bytes]:
    return [line for line in body.split(b"\n") if line.startswith(b"data:")]


def test_events_keep_their_order_whichever_path_they_take(
    make_settings: MakeSettings, direct_writes: list[bytes]
) -> None:
    e = [event(i) for i in range(10)]
    gap = 0.1  # each write its own read, with room for a busy machine
    script = [
        (HEAD, 0.3),  # time for the relay to be set up
        (chunk(e[0]), gap),  # plain: direct
        (chunk(e[1][:9]), gap),  # half an event: the task from here on
        (chunk(e[1][9:] + e[2]), gap),  # completes it, with one more
        (chunk(e[3]), gap),  # plain again: direct
        (chunk(e[4] + e[5]), gap),  # two plain events in one chunk: direct
        (chunk(e[6]) + chunk(e[7]), gap),  # two chunks in one read: one direct write
        # The last events with the usage the gateway asked for (dropped) and the end
        # of the response: left to the task, which writes them and the end at once.
        (chunk(e[8]) + chunk(e[9]) + chunk(usage_event()) + chunk(DONE) + b"0\r\n\r\n", 0),
    ]
    with upstream([script]) as url, gateway(make_settings, url) as gw:
        response = httpx.post(f"{gw}/v1/chat/completions", json=STREAM, headers=auth())
    assert response.status_code == 200
    expected = [line for ev in e for line in data_lines(ev)] + [DONE.strip()]
    assert data_lines(response.content) == expected
    assert direct_writes == [e[0], e[3], e[4] + e[5], e[6] + e[7]]


def test_a_client_that_stops_reading_gets_every_event_in_order(
    make_settings: MakeSettings, direct_writes: list[bytes]
) -> None:
    """Past the client socket's buffers the front stops writing directly; the task
    waits for the client to drain, and chunks read meanwhile wait behind it."""
    small, count, pad = 5, 200, 64 * 1024  # ~13 MB: more than the sockets buffer
    script = [(HEAD, 0.3)] + [(chunk(event(i)), 0.1) for i in range(small)]
    script += [(chunk(event(i, pad)), 0.0) for i in range(small, count)]
    script.append((chunk(DONE) + b"0\r\n\r\n", 0.0))
    with upstream([script]) as url, gateway(make_settings, url) as gw:
        with httpx.stream(
            "POST", f"{gw}/v1/chat/completions", json=STREAM, headers=auth(), timeout=30
        ) as response:
            stream = response.iter_raw(256 * 1024)
            body = next(stream)
            threading.Event().wait(0.5)  # the client stops reading for a while,
            for piece in stream:  # then reads slowly: the gateway pauses again and again
                body += piece
                threading.Event().wait(0.002)
    lines = data_lines(body)
    assert len(lines) == count + 1 and lines[-1] == DONE.strip()
    for i, line in enumerate(lines[:-1]):
        content = json.loads(line[5:])["choices"][0]["delta"]["content"]
        assert content == f"t{i}" + "x" * (pad if i >= small else 0)
    assert direct_writes[:small] == [event(i) for i in range(small)]  # in use before


def test_events_passed_on_directly_keep_the_read_timeout_from_firing(
    make_settings: MakeSettings, direct_writes: list[bytes]
) -> None:
    """The read timeout is the longest silence from vLLM, not the longest stream."""
    script = [(HEAD, 0.3)] + [(chunk(event(i)), 0.1) for i in range(12)]  # 1.5 s in all
    script.append((chunk(DONE) + b"0\r\n\r\n", 0.0))
    with upstream([script]) as url, gateway(make_settings, url, read_timeout_seconds=0.6) as gw:
        response = httpx.post(f"{gw}/v1/chat/completions", json=STREAM, headers=auth())
    lines = data_lines(response.content)
    assert b"error" not in response.content, response.content[-300:]
    assert len(lines) == 13 and lines[-1] == DONE.strip()
    assert len(direct_writes) == 12


def test_a_silent_upstream_still_times_out(make_settings: MakeSettings) -> None:
    script = [(HEAD, 0.05), (chunk(event(0)), 1.5), (chunk(DONE) + b"0\r\n\r\n", 0.0)]
    with upstream([script]) as url, gateway(make_settings, url, read_timeout_seconds=0.4) as gw:
        response = httpx.post(f"{gw}/v1/chat/completions", json=STREAM, headers=auth())
    lines = data_lines(response.content)
    assert lines[0] == data_lines(event(0))[0]
    assert b"did not answer in time" in lines[-1], lines[-1]


def test_a_pooled_connection_forgets_the_previous_relay() -> None:
    """A response closed with its relay still set goes back to the pool; the next
    request on that connection is read by its own reader, not by the old relay."""
    answer = b'{"ok": true}'
    scripts = [
        [(HEAD + chunk(event(0)) + chunk(DONE) + b"0\r\n\r\n", 0.0)],
        [
            (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%b" % (len(answer), answer),
                0.0,
            )
        ],
    ]

    async def go(url: str) -> tuple[list[bytes], bytes]:
        client = HttptoolsUpstream(
            connect_timeout_seconds=2, read_timeout_seconds=5, retry_after_seconds=1
        )
        offered: list[bytes] = []
        try:
            first = await client.send("POST", url + "/v1/x", [], b"{}")
            first.relay(lambda data: offered.append(data) is None)
            while await first.next_chunk() is not None:
                pass
            await first.aclose()  # the relay is not unset by the caller
            second = await client.send("POST", url + "/v1/y", [], b"{}")
            body = b"".join([c async for c in second.chunks()])
            await second.aclose()
        finally:
            await client.aclose()
        return offered, body

    with upstream(scripts) as url:
        offered, body = asyncio.run(go(url))
    assert body == answer and answer not in b"".join(offered)


class _Response:
    """An upstream response whose chunks the test hands over one by one."""

    def __init__(self) -> None:
        self.status = 200
        self.raw_headers = [(b"content-type", b"text/event-stream")]
        self.content_type = "text/event-stream"
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.sink: Any = None

    async def next_chunk(self) -> bytes | None:
        return await self.queue.get()

    def ended(self) -> bool:
        return False

    def relay(self, sink: Any) -> None:
        self.sink = sink

    async def aclose(self) -> None:
        pass


def test_the_direct_path_waits_while_the_task_holds_a_chunk() -> None:
    """While the relay task is writing a chunk (its `send` waiting for a slow client),
    a chunk read meanwhile must not overtake it on the direct path, even once the
    client takes data again (the task then writes first)."""

    async def go() -> tuple[list[bool], list[bytes]]:
        metrics = GatewayMetrics.create(CollectorRegistry())
        # Only the relay runs here: no admission, no upstream client.
        deps = ProxyDeps(cast(Any, None), cast(Any, None), metrics, retry_after_seconds=1)
        forward = Forward("POST", "/v1/chat/completions", Principal("t", "k"), [], stream=True)
        proxy = ProxyResponse(deps, forward)
        wire: list[bytes] = []
        sending = asyncio.Event()
        unblock = asyncio.Event()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("more_body"):
                sending.set()
                await unblock.wait()  # a client that is not reading
            wire.append(message.get("body", b""))

        def direct(body: bytes) -> bool:
            wire.append(body)
            return True

        proxy._direct = direct
        upstream = _Response()
        relay = asyncio.create_task(proxy._relay_events(cast(Any, upstream), send))
        await asyncio.sleep(0)
        answers = [upstream.sink(event(0))]  # nothing held: direct
        upstream.queue.put_nowait(event(1)[:9])  # the task takes this one
        upstream.queue.put_nowait(event(1)[9:])
        await sending.wait()
        answers.append(upstream.sink(event(2)))  # the task holds event 1
        unblock.set()
        upstream.queue.put_nowait(event(2))
        upstream.queue.put_nowait(None)
        await relay
        return answers, wire

    answers, wire = asyncio.run(go())
    assert answers == [True, False]
    assert b"".join(wire).index(b'"t1"') < b"".join(wire).index(b'"t2"')
