"""The JSON routes served ahead of FastAPI (gateway/standalone/hot.py) answer and count
as the FastAPI path did: the same errors, `gateway_requests_total` by route template
and status class, `gateway_rejected_total` by reason; everything else still reaches
FastAPI."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from starlette.types import Message

from gateway.core.headers import MAX_HEADER_COUNT
from gateway.standalone.app import create_app
from gateway.standalone.upstream import UpstreamResponse
from tests.gateway.conftest import MakeSettings, auth
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
ROUTE = "/v1/chat/completions"


def _count(registry: CollectorRegistry, status_class: str, route: str = ROUTE) -> float:
    labels = {"route": route, "status_class": status_class}
    return registry.get_sample_value("gateway_requests_total", labels) or 0.0


def _rejected(registry: CollectorRegistry, reason: str) -> float:
    return registry.get_sample_value("gateway_rejected_total", {"reason": reason}) or 0.0


def _openai_error(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json")
    return str(response.json()["error"]["message"])


def test_answers_and_refusals_are_counted_by_route_and_reason(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    app = create_app(make_settings(fake_vllm[1]), registry=registry)
    many = {f"x-h{i}": "v" for i in range(MAX_HEADER_COUNT + 1)}
    with serve(app) as url, httpx.Client(base_url=url) as client:
        ok = client.post(ROUTE, json={**CHAT, "stream": True}, headers=auth())
        no_key = client.post(ROUTE, json=CHAT)
        bad_json = client.post(ROUTE, content=b"{not json", headers=auth())
        too_many = client.post(ROUTE, json=CHAT, headers={**auth(), **many})
        completion = client.post("/v1/completions", json={"model": "tiny", "prompt": "a"})
    assert ok.status_code == 200 and ok.text.endswith("data: [DONE]\n\n")
    assert no_key.status_code == 401 and "key" in _openai_error(no_key).lower()
    assert bad_json.status_code == 400 and _openai_error(bad_json)
    assert too_many.status_code == 431 and _openai_error(too_many)
    assert completion.status_code == 401
    assert _count(registry, "2xx") == 1 and _count(registry, "4xx") == 3
    assert _count(registry, "4xx", "/v1/completions") == 1
    assert _rejected(registry, "unauthorized") == 2
    assert _rejected(registry, "bad_request") == 1
    assert _rejected(registry, "headers_too_large") == 1


class Broken:
    """An upstream client with a bug: anything but the gateway's own errors."""

    async def send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> UpstreamResponse:
        raise RuntimeError("a bug in the client")

    async def aclose(self) -> None:
        pass


def test_something_unexpected_is_a_counted_500(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    app = create_app(make_settings(), upstream_client=Broken(), registry=registry)
    with serve(app) as url:
        response = httpx.post(f"{url}{ROUTE}", json=CHAT, headers=auth())
    assert response.status_code == 500
    assert _openai_error(response) == "Internal gateway error."
    assert _count(registry, "5xx") == 1 and _count(registry, "2xx") == 0


async def _call(app: Any, method: str, path: str, messages: Sequence[Message]) -> list[Message]:
    """`app` called as uvicorn calls it, with `messages` to receive; what it sent."""
    incoming, sent = list(messages), []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(b"authorization", auth()["authorization"].encode()), (b"content-length", b"99")]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return sent


def test_a_client_that_leaves_while_sending_its_body_gets_nothing_and_counts_499(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    app = create_app(make_settings(), registry=registry)
    half = {"type": "http.request", "body": b'{"model": "tiny", ', "more_body": True}
    sent = asyncio.run(_call(app, "POST", ROUTE, [half]))
    assert sent == []
    assert _count(registry, "4xx") == 1 and _count(registry, "5xx") == 0


def test_other_methods_and_paths_still_reach_fastapi(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    app = create_app(make_settings(fake_vllm[1]), registry=registry)
    with serve(app) as url, httpx.Client(base_url=url) as client:
        wrong_method = client.get(ROUTE, headers=auth())
        schema = client.get("/openapi.json")
        models = client.get("/v1/models", headers=auth())
    assert wrong_method.status_code == 405 and "GET" in _openai_error(wrong_method)
    assert ROUTE in json.loads(schema.text)["paths"]
    assert models.status_code == 200
    assert _count(registry, "4xx") == 1
    assert _count(registry, "2xx", "/v1/models") == 1
