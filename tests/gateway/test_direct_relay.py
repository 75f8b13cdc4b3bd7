"""Token events written to the client straight from the upstream read callback
(`gateway.proxy._DirectRelay`), under a real uvicorn server: the client must get
exactly the events vLLM sent, in order, whichever path each chunk took (direct,
or the relay loop for a split event, the dropped usage chunk, a slow client)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httptools
import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway import proxy
from gateway.app import create_app
from tests.gateway.conftest import MakeSettings, auth
from tests.gateway.server import serve

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
)
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def token(i: int, pad: int = 0) -> bytes:
    delta = {"choices": [{"index": 0, "delta": {"content": f"e{i}" + "x" * pad}}]}
    return b"data: " + json.dumps(delta).encode() + b"\n\n"


USAGE_EVENT = b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\n"
DONE = b"data: [DONE]\n\n"

Script = list[tuple[bytes, float]]  # (bytes to write as one HTTP chunk, pause after it)


@contextmanager
def scripted_upstream(script: Script) -> Iterator[str]:
    """A model server that answers every request by writing `script`, chunk by chunk."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            if not head.startswith(b"POST "):  # the gateway's health checks
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                return
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(HEAD)
            for piece, pause in script:
                conn.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
                if pause:
                    time.sleep(pause)
            conn.sendall(b"0\r\n\r\n")

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        listener.close()


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each offer to the direct path returned (True: written from the callback)."""
    seen: list[bool] = []
    original = proxy._DirectRelay.write

    def recording(self: proxy._DirectRelay, chunk: bytes) -> bool:
        taken = original(self, chunk)
        seen.append(taken)
        return taken

    monkeypatch.setattr(proxy._DirectRelay, "write", recording)
    return seen


@contextmanager
def gateway(upstream: str, make_settings: MakeSettings, registry: CollectorRegistry):
    with serve(create_app(make_settings(upstream), registry=registry)) as url:
        yield url


def events_of(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


def test_paced_stream_goes_direct_and_arrives_exactly(
    make_settings: MakeSettings, registry: CollectorRegistry, writes: list[bool]
) -> None:
    event = token(5)
    script: Script = [(token(i), 0.005) for i in range(5)]
    script += [(event[:10], 0.03), (event[10:], 0.005)]  # one event split across reads
    script += [(token(i), 0.005) for i in range(6, 20)]
    script += [(USAGE_EVENT, 0.005), (DONE, 0)]
    with scripted_upstream(script) as upstream, gateway(upstream, make_settings, registry) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=auth())
    assert response.status_code == 200
    # The usage chunk the gateway asked for is gone; everything else is byte-exact.
    assert events_of(response.content) == [token(i) for i in range(20)] + [DONE]
    assert writes.count(True) >= 15, writes  # most events took the direct path
    assert False in writes  # the split event went through the relay loop
    assert registry.get_sample_value("gateway_ttft_seconds_count") == 1
    gaps = registry.get_sample_value("gateway_inter_token_latency_seconds_count")
    assert gaps == 20 - 1  # between 20 token events, whichever path each took
    tenant = {"tenant": "alice"}
    assert registry.get_sample_value("gateway_prompt_tokens_total", tenant) == 7
    assert registry.get_sample_value("gateway_completion_tokens_total", tenant) == 3


def read_all(url: str, request_body: bytes, wait_before_reading_s: float) -> bytes:
    """A client with a small receive buffer that starts reading late: the gateway's
    writes to it back up and uvicorn pauses them. Returns the de-chunked body."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
        f"authorization: {auth()['authorization']}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(request_body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + request_body)
    time.sleep(wait_before_reading_s)
    body: list[bytes] = []
    done = threading.Event()

    class Parsed:
        def on_body(self, data: bytes) -> None:
            body.append(data)

        def on_message_complete(self) -> None:
            done.set()

    parser = httptools.HttpResponseParser(Parsed())
    sock.settimeout(30)
    with sock:
        while not done.is_set():
            data = sock.recv(16384)
            if not data:
                break
            parser.feed_data(data)
            time.sleep(0.0005)  # a slow reader: the gateway's writes pause and resume often
    assert done.is_set(), "the response did not end"
    return b"".join(body)


def test_a_slow_client_gets_every_event_in_order_through_back_pressure(
    make_settings: MakeSettings, registry: CollectorRegistry, writes: list[bool]
) -> None:
    count = 2000  # a few paced events (direct), then a flood the client cannot keep up with
    script: Script = [(token(i, pad=4000), 0.02 if i < 5 else 0) for i in range(count)]
    script += [(USAGE_EVENT, 0), (DONE, 0)]
    with scripted_upstream(script) as upstream, gateway(upstream, make_settings, registry) as url:
        body = read_all(url, json.dumps(CHAT).encode(), wait_before_reading_s=1.0)
    assert events_of(body) == [token(i, pad=4000) for i in range(count)] + [DONE]
    assert True in writes and False in writes, (writes.count(True), writes.count(False))


def test_no_direct_path_without_uvicorns_httptools_cycle() -> None:
    """Any other server (or a wrapped `send`) keeps the plain ASGI path."""

    class Response:
        def set_sink(self, sink: Callable[[bytes], bool] | None) -> None:
            raise AssertionError("must not be offered")

    async def send(message: object) -> None:
        pass

    from gateway.sse import EventSplitter, StreamObserver

    observer = StreamObserver(False, lambda seconds: None)
    assert proxy._DirectRelay.offer(Response(), send, EventSplitter(), observer) is None  # type: ignore[arg-type]


# -- the ordering rules, one at a time (the races they prevent are rare on a real socket) --


def test_a_chunk_queued_behind_a_refused_one_is_not_offered_to_the_sink() -> None:
    from gateway.h1client import _Connection

    offered: list[bytes] = []

    def sink(chunk: bytes) -> bool:
        offered.append(chunk)
        return chunk != b"split"

    conn = _Connection()
    conn.sink = sink
    conn.on_body(b"one")  # taken
    conn.on_body(b"split")  # refused: queued for the relay loop
    conn.on_body(b"two")  # must wait behind it, not overtake it
    assert offered == [b"one", b"split"]
    assert list(conn._chunks) == [b"split", b"two"]


class _Flow:
    write_paused = False


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _Cycle:
    def __init__(self) -> None:
        self.flow = _Flow()
        self.disconnected = False
        self.transport = _Transport()


@pytest.mark.parametrize("state", ["busy", "paused", "disconnected", "split", "usage"])
def test_the_direct_path_refuses_whenever_something_is_pending(state: str) -> None:
    from gateway.sse import EventSplitter, StreamObserver

    cycle, splitter = _Cycle(), EventSplitter()
    relay = proxy._DirectRelay(cycle, splitter, StreamObserver(True, lambda seconds: None))
    assert relay.write(token(0))  # nothing pending: written, chunk-framed for HTTP/1.1
    assert cycle.transport.written == [b"%x\r\n%b\r\n" % (len(token(0)), token(0))]
    chunk = token(1)
    if state == "busy":
        relay.busy = True  # the relay loop holds an earlier chunk
    elif state == "paused":
        cycle.flow.write_paused = True  # the client is not reading
    elif state == "disconnected":
        cycle.disconnected = True
    elif state == "split":
        splitter.feed(b"data: {")  # half an event is buffered in the relay loop
    else:
        chunk = USAGE_EVENT  # may have to be dropped: the relay loop decides
    assert not relay.write(chunk)
    assert len(cycle.transport.written) == 1
