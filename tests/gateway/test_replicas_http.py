"""Two synthetic vLLM replicas behind the gateway: affinity, fallback, return, metrics."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.standalone.app import create_app
from tests.gateway.conftest import MakeSettings, auth
from tests.gateway.fake_vllm import USAGE, FakeVLLM
from tests.gateway.server import serve

SESSIONS = 12
HEALTH_INTERVAL_S = 0.1


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _chat(session: int, turn: int) -> dict[str, Any]:
    messages = [{"role": "system", "content": f"You are agent {session}."}]
    messages += [{"role": "user", "content": f"step {t}"} for t in range(turn + 1)]
    return {"model": "tiny", "messages": messages, "stream": True}


def _sessions_seen(fake: FakeVLLM) -> set[int]:
    return {int(body["messages"][0]["content"].split()[-1][:-1]) for body in fake.requests}


def _run_turn(url: str, turn: int) -> list[int]:
    statuses = []
    for session in range(SESSIONS):
        response = httpx.post(
            f"{url}/v1/chat/completions", json=_chat(session, turn), headers=auth()
        )
        statuses.append(response.status_code)
        assert "error" not in response.text
    return statuses


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def _wait(predicate: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _settled(registry: CollectorRegistry) -> bool:
    return not any(
        _sample(registry, "gateway_upstream_in_flight", replica=name) for name in ("a", "b")
    )


@contextmanager
def _gateway(
    make_settings: MakeSettings, registry: CollectorRegistry, ports: list[int], **overrides: Any
) -> Iterator[str]:
    urls = ",".join(f"http://127.0.0.1:{p}" for p in ports)
    values = {"upstream_names": "a,b", "health_interval_seconds": HEALTH_INTERVAL_S, **overrides}
    settings = make_settings(urls, **values)
    with serve(create_app(settings, registry=registry)) as url:
        yield url


def test_sessions_stick_to_one_replica_and_spread_over_both(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fakes, ports = [FakeVLLM(), FakeVLLM()], [_port(), _port()]
    with ExitStack() as stack:
        for fake, port in zip(fakes, ports, strict=True):
            stack.enter_context(serve(fake.app(), port=port))
        url = stack.enter_context(_gateway(make_settings, registry, ports))
        for turn in range(3):
            assert _run_turn(url, turn) == [200] * SESSIONS
    seen = [_sessions_seen(fake) for fake in fakes]
    assert seen[0].isdisjoint(seen[1])  # every agent session stayed on one replica
    assert seen[0] and seen[1]  # and the agent sessions used both
    assert len(fakes[0].requests) + len(fakes[1].requests) == 3 * SESSIONS
    for name in ("a", "b"):
        assert _sample(registry, "gateway_upstream_healthy", replica=name) == 1
        assert _sample(registry, "gateway_upstream_in_flight", replica=name) == 0
    ok = sum(
        _sample(registry, "gateway_upstream_requests_total", replica=n, outcome="ok") for n in "ab"
    )
    assert ok == 3 * SESSIONS


def test_round_robin_alternates_whatever_the_prefix(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fakes, ports = [FakeVLLM(), FakeVLLM()], [_port(), _port()]
    with ExitStack() as stack:
        for fake, port in zip(fakes, ports, strict=True):
            stack.enter_context(serve(fake.app(), port=port))
        url = stack.enter_context(_gateway(make_settings, registry, ports, routing="round_robin"))
        for _ in range(4):
            httpx.post(f"{url}/v1/chat/completions", json=_chat(0, 0), headers=auth())
    assert [len(f.requests) for f in fakes] == [2, 2]


def test_replica_down_then_back_no_failed_request(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fakes, ports = [FakeVLLM(), FakeVLLM()], [_port(), _port()]
    with ExitStack() as stack:
        stack.enter_context(serve(fakes[0].app(), port=ports[0]))
        second = ExitStack()
        second.enter_context(serve(fakes[1].app(), port=ports[1]))
        url = stack.enter_context(_gateway(make_settings, registry, ports))
        assert _run_turn(url, 0) == [200] * SESSIONS
        on_b = _sessions_seen(fakes[1])
        assert on_b
        second.close()  # replica b goes away
        before_a = len(fakes[0].requests)
        assert _run_turn(url, 1) == [200] * SESSIONS  # b's agent sessions fall back to a
        assert len(fakes[0].requests) - before_a == SESSIONS
        assert _sample(registry, "gateway_upstream_healthy", replica="b") == 0
        assert _sample(registry, "gateway_upstream_errors_total", kind="connect") == 0
        with serve(FakeVLLM().app(), port=ports[1]):  # b is back (a fresh process)
            assert _wait(lambda: _sample(registry, "gateway_upstream_healthy", replica="b") == 1)
            assert httpx.get(f"{url}/readyz").json()["replicas"] == {"a": "healthy", "b": "healthy"}
            before_b = _sample(
                registry, "gateway_upstream_requests_total", replica="b", outcome="ok"
            )
            assert _run_turn(url, 2) == [200] * SESSIONS
            # The client has its answer a moment before the gateway counts it.
            assert _wait(lambda: _settled(registry))
            after_b = _sample(
                registry, "gateway_upstream_requests_total", replica="b", outcome="ok"
            )
            assert after_b - before_b == len(on_b)  # exactly b's agent sessions came back


def test_failed_connection_is_retried_on_the_other_replica(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    """No background check in time: the refused connection itself moves the request."""
    ports = [_port(), _port()]
    fake_a = FakeVLLM()
    with serve(fake_a.app(), port=ports[0]):
        with _gateway(make_settings, registry, ports, health_interval_seconds=3600) as url:
            time.sleep(0.2)  # the start-up check has run; b is marked unhealthy
            with serve(FakeVLLM().app(), port=ports[1]):
                httpx.get(f"{url}/readyz")  # marks b healthy again
                assert _sample(registry, "gateway_upstream_healthy", replica="b") == 1
            assert _run_turn(url, 0) == [200] * SESSIONS  # b refuses: retried on a
    assert len(fake_a.requests) == SESSIONS
    assert _sample(registry, "gateway_upstream_requests_total", replica="b", outcome="connect") == 1
    assert _sample(registry, "gateway_upstream_healthy", replica="b") == 0
    assert _sample(registry, "gateway_upstream_errors_total", kind="connect") == 0


class _DiesOnSecondChat:
    """A replica on `port` that answers /health and its first chat request, then
    dies on the second before answering it: its listener and every connection
    close, as when vLLM is killed while a request is queued or in prefill."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", port))
        self.chats = 0
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffered = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, rest = buffered.partition(b"\r\n\r\n")
                match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                length = int(match.group(1)) if match else 0
                while len(rest) < length:
                    rest += conn.recv(65536)
                buffered = rest[length:]
                if head.split(b" ")[1] == b"/health":
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    continue
                with self.lock:
                    self.chats += 1
                    dies = self.chats > 1
                if dies:
                    self.close()
                    return
                body = json.dumps(
                    {
                        "id": "chatcmpl-b",
                        "object": "chat.completion",
                        "model": "tiny",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "hi"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": USAGE,
                    }
                ).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n" % len(body) + body
                )
        except OSError:
            return

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        except OSError:
            pass
        self.listener.close()
        for conn in self.conns:
            conn.close()


def test_a_request_whose_replica_dies_before_answering_goes_to_the_other(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    """b takes a request on its pooled keep-alive connection and dies without an
    answer: the request is sent again, b refuses it, and a serves it; the client
    sees only 200s."""
    ports = [_port(), _port()]
    fake_a = FakeVLLM()
    replica_b = _DiesOnSecondChat(ports[1])
    try:
        with serve(fake_a.app(), port=ports[0]):
            with _gateway(make_settings, registry, ports, health_interval_seconds=3600) as url:
                for session in range(SESSIONS):
                    body = {**_chat(session, 0), "stream": False}
                    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth())
                    assert answer.status_code == 200, answer.text
    finally:
        replica_b.close()
    assert replica_b.chats == 2, "b answered one chat and died on the next"
    assert len(fake_a.requests) == SESSIONS - 1
    assert _sample(registry, "gateway_upstream_requests_total", replica="b", outcome="ok") == 1
    assert _sample(registry, "gateway_upstream_requests_total", replica="b", outcome="connect") == 1
    assert _sample(registry, "gateway_upstream_healthy", replica="b") == 0
    assert _sample(registry, "gateway_upstream_errors_total", kind="protocol") == 0


def test_readyz_ready_while_one_replica_is(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    ports = [_port(), _port()]
    with _gateway(make_settings, registry, ports) as url:
        assert httpx.get(f"{url}/readyz").status_code == 503
        with serve(FakeVLLM().app(), port=ports[1]):
            answer = httpx.get(f"{url}/readyz")
            assert answer.status_code == 200
            assert answer.json()["replicas"] == {"a": "unhealthy", "b": "healthy"}


@pytest.mark.parametrize("names", ["", "left,right"])
def test_replica_labels_are_names_or_indices_never_urls(
    make_settings: MakeSettings, registry: CollectorRegistry, names: str
) -> None:
    settings = make_settings("http://user:pw@127.0.0.1:9,http://127.0.0.1:10", upstream_names=names)
    create_app(settings, registry=registry)
    labels = {
        s.labels.get("replica")
        for family in registry.collect()
        for s in family.samples
        if "replica" in s.labels
    }
    assert labels == ({"left", "right"} if names else {"0", "1"})
