"""Error paths: OpenAI-shaped bodies, statuses, Retry-After, metrics (fake transports)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from tests.gateway.conftest import BOB_KEY, MakeSettings, auth
from tests.gateway.httpx_upstream import httpx_app

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


def _failing(exc: type[httpx.HTTPError]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("boom", request=request)

    return httpx.MockTransport(handler)


def _call(app: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def _assert_openai_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"}
    assert error["code"] == code
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("exc", "status", "code", "kind"),
    [
        (httpx.ConnectError, 503, "upstream_unavailable", "connect"),
        (httpx.ConnectTimeout, 503, "upstream_unavailable", "connect"),
        (httpx.ReadTimeout, 504, "upstream_timeout", "timeout"),
        (httpx.RemoteProtocolError, 502, "bad_gateway", "protocol"),
    ],
)
def test_upstream_failures_map_to_status(
    make_settings: MakeSettings,
    registry: CollectorRegistry,
    exc: type[httpx.HTTPError],
    status: int,
    code: str,
    kind: str,
) -> None:
    app = httpx_app(make_settings(), _failing(exc), registry=registry)
    response = _call(app, "POST", "/v1/chat/completions", json=CHAT, headers=auth())
    _assert_openai_error(response, status, code)
    assert ("retry-after" in response.headers) == (status == 503)
    assert registry.get_sample_value("gateway_upstream_errors_total", {"kind": kind}) == 1
    assert registry.get_sample_value("gateway_in_flight") == 0


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "Missing API key"),
        (auth("sk-wrong"), "Invalid API key"),
        ({"authorization": "Basic x"}, "Missing"),
    ],
)
def test_auth_refused(
    make_settings: MakeSettings, registry: CollectorRegistry, headers: dict[str, str], message: str
) -> None:
    app = httpx_app(make_settings(), _failing(httpx.ConnectError), registry=registry)
    response = _call(app, "POST", "/v1/chat/completions", json=CHAT, headers=headers)
    _assert_openai_error(response, 401, "invalid_api_key")
    assert message in response.json()["error"]["message"]
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "unauthorized"}) == 1


def test_models_needs_a_key_but_probes_do_not(make_settings: MakeSettings) -> None:
    app = httpx_app(make_settings(), _failing(httpx.ConnectError))
    _assert_openai_error(_call(app, "GET", "/v1/models"), 401, "invalid_api_key")
    assert _call(app, "GET", "/healthz").json() == {"status": "ok"}
    assert _call(app, "GET", "/readyz").status_code == 503
    assert b"gateway_requests_total" in _call(app, "GET", "/metrics").content


def test_auth_off_serves_without_key(make_settings: MakeSettings) -> None:
    app = httpx_app(make_settings(auth="off", api_keys=""), _failing(httpx.ConnectError))
    response = _call(app, "POST", "/v1/chat/completions", json=CHAT)
    _assert_openai_error(response, 503, "upstream_unavailable")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"\xff", "not valid"),
    ],
)
def test_malformed_json_is_400(
    make_settings: MakeSettings, registry: CollectorRegistry, content: bytes, message: str
) -> None:
    app = httpx_app(make_settings(), _failing(httpx.ConnectError), registry=registry)
    response = _call(app, "POST", "/v1/chat/completions", content=content, headers=auth())
    _assert_openai_error(response, 400, "invalid_request")
    assert message in response.json()["error"]["message"]
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "bad_request"}) == 1


def test_bad_client_cache_salt_is_400(make_settings: MakeSettings) -> None:
    app = httpx_app(make_settings(), _failing(httpx.ConnectError))
    body = {**CHAT, "cache_salt": 7}
    response = _call(app, "POST", "/v1/chat/completions", json=body, headers=auth())
    _assert_openai_error(response, 400, "invalid_request")


@pytest.mark.parametrize("chunked", [False, True])
def test_body_over_limit_is_413(
    make_settings: MakeSettings, registry: CollectorRegistry, chunked: bool
) -> None:
    settings = make_settings(max_body_bytes=2048)
    app = httpx_app(settings, _failing(httpx.ConnectError), registry=registry)
    big = b'{"x": "' + b"a" * 4096 + b'"}'

    async def chunks() -> Any:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    content: Any = chunks() if chunked else big
    response = _call(app, "POST", "/v1/completions", content=content, headers=auth())
    _assert_openai_error(response, 413, "request_too_large")
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "body_too_large"}) == 1


def test_unknown_route_and_method(make_settings: MakeSettings) -> None:
    app = httpx_app(make_settings(), _failing(httpx.ConnectError))
    _assert_openai_error(_call(app, "GET", "/nope"), 404, "not_found")
    _assert_openai_error(_call(app, "GET", "/v1/chat/completions"), 405, "method_not_allowed")


def test_stream_cut_by_upstream_ends_with_error_event(make_settings: MakeSettings) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        def body() -> Any:
            yield b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
            raise httpx.ReadError("cut", request=request)

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    app = httpx_app(make_settings(), _mock_async(handler))
    response = _call(
        app, "POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth(BOB_KEY)
    )
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert '"content": "a"' in events[0]
    assert '"bad_gateway"' in events[-1]


def _mock_async(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.MockTransport:
    """A MockTransport whose sync body generator is exposed as an async stream."""

    def wrapped(request: httpx.Request) -> httpx.Response:
        response = handler(request)
        sync_iter = response.stream

        class AsyncBody(httpx.AsyncByteStream):
            async def __aiter__(self) -> Any:
                for chunk in sync_iter:  # type: ignore[union-attr]
                    yield chunk

        return httpx.Response(response.status_code, headers=response.headers, stream=AsyncBody())

    return httpx.MockTransport(wrapped)
