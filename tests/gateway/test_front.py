"""The front protocol (gateway/front.py) over real sockets: the same answers as the
ASGI path, the head written with the first event, and what it leaves to the app."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from prometheus_client import CollectorRegistry
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.app import create_app
from gateway.front import FrontProtocol, http_protocol
from tests.gateway.conftest import ALICE_KEY, MakeSettings, auth
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
VOLATILE_HEADERS = {"date"}


@contextmanager
def _gateway(make_settings: MakeSettings, upstream: str, *, front: bool) -> Iterator[str]:
    app = create_app(make_settings(upstream), registry=CollectorRegistry())
    with serve(app, front=front) as url:
        yield url


def _raw(url: str, request: bytes, *, until: bytes, timeout_s: float = 5.0) -> bytes:
    """Send `request` on a fresh connection; read until `until` has arrived."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(request)
        received = b""
        while until not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


def _post(path: str, body: dict[str, object], extra: bytes = b"") -> bytes:
    payload = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {ALICE_KEY}\r\ncontent-length: {len(payload)}\r\n".encode()
        + extra
        + b"\r\n"
        + payload
    )


def test_gateway_apps_get_the_front_and_others_do_not(make_settings: MakeSettings) -> None:
    app = create_app(make_settings(), registry=CollectorRegistry())
    protocol = http_protocol(app)
    assert isinstance(protocol, type) and issubclass(protocol, FrontProtocol)
    assert protocol.fast_routes is app.fast_routes
    assert http_protocol(FakeVLLM().app()) == "httptools"


def test_a_changed_uvicorn_falls_back_to_the_asgi_path(
    make_settings: MakeSettings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(make_settings(), registry=CollectorRegistry())
    monkeypatch.delattr(HttpToolsProtocol, "_start_asgi_task")
    assert http_protocol(app) == "httptools"
    assert "serving without the front" in caplog.text


def test_front_and_asgi_paths_answer_alike(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings
) -> None:
    """Status, headers (but the date) and body are the same either way."""
    # (body, with a key): a stream, a JSON answer, vLLM's 404, the gateway's 400 for
    # malformed JSON and its 401 for a missing key.
    requests: list[tuple[bytes, bool]] = [
        (json.dumps({**CHAT, "stream": True}).encode(), True),
        (json.dumps(CHAT).encode(), True),
        (json.dumps({**CHAT, "model": "missing"}).encode(), True),
        (b'{"model": "tiny", "messages": [', True),
        (json.dumps(CHAT).encode(), False),
    ]
    answers: dict[bool, list[tuple[int, list[tuple[str, str]], bytes]]] = {}
    for front in (True, False):
        with _gateway(make_settings, fake_vllm[1], front=front) as url:
            answers[front] = []
            for body, keyed in requests:
                headers = {"content-type": "application/json", **(auth() if keyed else {})}
                response = httpx.post(f"{url}/v1/chat/completions", content=body, headers=headers)
                kept = [
                    (k, v) for k, v in response.headers.multi_items() if k not in VOLATILE_HEADERS
                ]
                answers[front].append((response.status_code, kept, response.content))
    assert [a[0] for a in answers[True]] == [200, 200, 404, 400, 401]
    assert answers[True] == answers[False]


@pytest.mark.parametrize(("front", "writes"), [(True, 1), (False, 2)])
def test_a_json_answer_goes_out_in_one_write(
    front: bool,
    writes: int,
    fake_vllm: tuple[FakeVLLM, str],
    make_settings: MakeSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Head and body ready together: one write to the client's socket (uvicorn's own
    cycle, the ASGI path, writes the head and the body separately)."""
    written: list[bytes] = []
    transport = asyncio.selector_events._SelectorSocketTransport  # the test servers' loop
    original = transport.write

    port: list[int] = []

    def counting(self: asyncio.Transport, data: bytes) -> None:
        name = self.get_extra_info("sockname")
        if port and name and name[1] == port[0]:  # the gateway's side only
            written.append(bytes(data))
        original(self, data)  # type: ignore[arg-type]

    monkeypatch.setattr(transport, "write", counting)
    with _gateway(make_settings, fake_vllm[1], front=front) as url:
        port.append(int(url.rsplit(":", 1)[1]))
        response = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=auth())
    assert response.status_code == 200 and response.json()["object"] == "chat.completion"
    assert len(written) == writes
    assert written[0].startswith(b"HTTP/1.1 200 OK\r\n") and written[-1].endswith(response.content)


def test_a_stream_head_is_not_held_for_the_first_token(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings
) -> None:
    """vLLM answers a stream's head before the first token is ready; the client gets
    the head then, so it has parsed it by the time the token arrives."""
    fake = fake_vllm[0]
    fake.hold_first = True
    with _gateway(make_settings, fake_vllm[1], front=True) as url:
        with httpx.stream(
            "POST", f"{url}/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth()
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert not fake.release.is_set()  # the head came while vLLM held the first token
            fake.release.set()
            events = [line for line in response.iter_lines() if line.startswith("data:")]
    assert '"t0"' in events[0] and events[-1] == "data: [DONE]"


def test_pipelined_requests_are_answered_in_order(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings
) -> None:
    with _gateway(make_settings, fake_vllm[1], front=True) as url:
        first = _post("/v1/embeddings", {"input": "first"})
        second = _post("/v1/embeddings", {"input": "second"})
        received = _raw(url, first + second, until=b'"second"')
    assert received.count(b"HTTP/1.1 200 OK") == 2
    assert received.index(b'"first"') < received.index(b'"second"')


def test_expect_100_continue_is_left_to_the_asgi_path(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings
) -> None:
    """The body is only sent after `100 Continue`, which uvicorn's own cycle sends."""
    request = _post("/v1/embeddings", {"input": "x"}, extra=b"expect: 100-continue\r\n")
    head, body = request.split(b"\r\n\r\n", 1)
    with _gateway(make_settings, fake_vllm[1], front=True) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(head + b"\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(body)
            received = b""
            while b'"echo"' not in received:
                chunk = sock.recv(65536)
                assert chunk, "connection closed before the answer"
                received += chunk
    assert received.startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize(
    ("access_log", "level", "front_on"),
    [
        (True, "info", False),  # access lines written: uvicorn's cycle writes them
        (True, "warning", True),  # on, but below the level: nothing to write
        (False, "info", True),
    ],
)
def test_access_log_lines_keep_uvicorn_writing_them(
    access_log: bool, level: str, front_on: bool, make_settings: MakeSettings
) -> None:
    app = create_app(make_settings(), registry=CollectorRegistry())
    protocol = http_protocol(app)
    assert isinstance(protocol, type) and issubclass(protocol, FrontProtocol)
    config = uvicorn.Config(app, http=protocol, access_log=access_log, log_level=level)
    config.load()
    loop = asyncio.new_event_loop()
    try:
        instance = protocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        assert instance._front_on is front_on
    finally:
        loop.close()
