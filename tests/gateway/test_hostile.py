"""Hostile input found by the reliability suite: lone surrogates, huge headers, and a
declared-too-large body — each a 4xx with an OpenAI-shaped body, never a 500/reset."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.core.headers import MAX_HEADER_BYTES, MAX_HEADER_COUNT
from gateway.core.prepare import parse_json
from gateway.standalone.app import create_app
from tests.gateway.httpx_upstream import httpx_app


def _upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"id": "x", "object": "chat.completion", "choices": []})


@pytest.fixture
def send(make_settings):  # type: ignore[no-untyped-def]
    """send(method, path, **kwargs) -> response, through the ASGI app (no socket)."""
    settings = make_settings("http://upstream.test", auth="off")
    app = httpx_app(settings, httpx.MockTransport(_upstream), registry=CollectorRegistry())

    def call(method: str, path: str, **kwargs):  # type: ignore[no-untyped-def]
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw.test") as c:
                return await c.request(method, path, **kwargs)

        return asyncio.run(go())

    return call


def _is_openai_error(response: httpx.Response) -> bool:
    error = response.json()["error"]
    return {"message", "type", "code"} <= set(error)


def test_lone_surrogate_is_400(send) -> None:  # type: ignore[no-untyped-def]
    raw = b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}],"max_tokens":1}'
    response = send(
        "POST", "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and _is_openai_error(response)
    assert "surrogate" in response.json()["error"]["message"]


def test_surrogate_pair_emoji_passes() -> None:
    raw = b'{"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
    assert parse_json(raw).value["messages"][0]["content"] == "\U0001f600"


@pytest.mark.parametrize(
    "headers",
    [
        {f"x-h{i}": "v" for i in range(MAX_HEADER_COUNT + 1)},
        {"x-big": "a" * (MAX_HEADER_BYTES + 1)},
    ],
)
def test_too_many_or_too_large_headers_are_431(send, headers) -> None:  # type: ignore[no-untyped-def]
    response = send("GET", "/v1/models", headers=headers)
    assert response.status_code == 431 and _is_openai_error(response)


def test_declared_too_large_body_gets_413_over_a_real_socket(make_settings) -> None:  # type: ignore[no-untyped-def]
    """The client is still sending when the gateway refuses: it must read the 413,
    not a connection reset (the body is drained up to a bound)."""
    from tests.gateway.server import serve

    settings = make_settings("http://127.0.0.1:9", auth="off", max_body_bytes=1 << 20)
    app = create_app(settings, registry=CollectorRegistry())
    body = b'{"model":"m","messages":[],"pad":"' + b"a" * (2 << 20) + b'"}'
    with serve(app) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
            timeout=30,
        )
    assert response.status_code == 413 and _is_openai_error(response)
