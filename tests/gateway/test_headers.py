"""The headers the gateway sends vLLM: the client's, less the dropped ones, and the
gateway's own, each field once. vLLM's server took a repeated Content-Type; a strict
one (aiohttp's) refuses the request with 400 "Duplicate 'Content-Type' header found"."""

from __future__ import annotations

from gateway.core.headers import forward_headers


def test_the_gateway_s_content_type_replaces_the_client_s_in_any_case() -> None:
    raw = [
        (b"Content-Type", b"text/plain"),
        (b"accept", b"*/*"),
        (b"content-type", b"application/json; charset=utf-8"),
        (b"authorization", b"Bearer sk-client"),
        (b"x-sparkserve-bypass", b"token"),
    ]
    sent = forward_headers(raw, {"content-type": "application/json"})
    assert [value for name, value in sent if name.lower() == "content-type"] == ["application/json"]
    assert sent == [("accept", "*/*"), ("content-type", "application/json")]


def test_without_a_replacement_the_client_s_headers_pass_in_order() -> None:
    raw = [(b"content-type", b"application/json"), (b"x-trace-id", b"1"), (b"Host", b"a")]
    assert forward_headers(raw, {}) == [("content-type", "application/json"), ("x-trace-id", "1")]
