"""The request path's JSON (orjson with fallbacks) reads and writes what the standard
library does: the expected values here come from `json` itself or from literals."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.core import jsoncodec
from tests.gateway.httpx_upstream import httpx_app

BIG = 123456789012345678901234567890
CASES = [
    b'{"seed": 123456789012345678901234567890}',  # beyond 64 bits: orjson makes it a float
    b'{"seed": -9223372036854775809}',  # one below int64
    b'{"seed": 9223372036854775807, "n": 18446744073709551615}',  # int64 max, uint64 max
    b'{"t": NaN, "u": Infinity, "v": -Infinity}',  # json accepts, orjson refuses
    b'{"x": 1e400}',  # json reads inf
    '{"a": "\u00e9\u4e2d", "b": [1, 2.5, 1e16, -0.0, true, null]}'.encode("utf-16"),
    b'{"e": "\\ud83d\\ude00", "slash": "a/b"}',
    b'{"deep": ' + b"[" * 300 + b"1" + b"]" * 300 + b"}",  # deeper than orjson writes
]


def _same(a: object, b: object) -> bool:
    """Equal as JSON values, NaN included (json spells it the same both times)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("raw", CASES)
def test_round_trip_matches_the_standard_library(raw: bytes) -> None:
    parsed = jsoncodec.loads(raw)
    assert _same(parsed.value, json.loads(raw))
    written = jsoncodec.dumps(parsed.value, parsed.exact)
    assert _same(json.loads(written), json.loads(raw))


def test_big_integer_stays_an_integer() -> None:
    parsed = jsoncodec.loads(b'{"seed": 123456789012345678901234567890}')
    assert parsed.value["seed"] == BIG and isinstance(parsed.value["seed"], int)
    assert b"123456789012345678901234567890" in jsoncodec.dumps(parsed.value, parsed.exact)


def test_bad_json_raises_what_json_raises() -> None:
    for raw in (b"{", b'{"a": "\x01"}', b"\xff\xfe\xfa"):
        with pytest.raises(ValueError):
            json.loads(raw)
        with pytest.raises(ValueError):
            jsoncodec.loads(raw)


def test_canonical_ignores_key_order_only() -> None:
    a = {"b": [1, {"y": 2, "x": 1}], "a": "s"}
    b = {"a": "s", "b": [1, {"x": 1, "y": 2}]}
    assert jsoncodec.canonical(a) == jsoncodec.canonical(b)
    assert jsoncodec.canonical(a) != jsoncodec.canonical({**a, "a": "t"})
    assert jsoncodec.canonical([1, 2]) != jsoncodec.canonical([2, 1])
    # Not orjson-writable (a big integer): the standard library's sorted form.
    assert jsoncodec.canonical({"z": BIG, "a": 1}) == b'{"a":1,"z":%d}' % BIG


def test_loads_or_none() -> None:
    assert jsoncodec.loads_or_none(b'{"usage": {"prompt_tokens": 3}}') == {
        "usage": {"prompt_tokens": 3}
    }
    assert jsoncodec.loads_or_none(b"not json") is None
    assert jsoncodec.loads_or_none(b"[" * 100_000) is None  # too deep for both parsers


def test_gateway_forwards_what_the_client_sent(make_settings) -> None:  # type: ignore[no-untyped-def]
    """Through the app: vLLM receives the client's numbers as written, not as floats."""
    seen: list[bytes] = []

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            yield b'{"id": "x", "object": "chat.completion", "choices": []}'

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, headers={"content-type": "application/json"}, stream=Body())

    settings = make_settings("http://upstream.test", auth="off")
    app = httpx_app(settings, httpx.MockTransport(upstream), registry=CollectorRegistry())
    raw = (
        b'{"model": "m", "seed": 123456789012345678901234567890, "top_p": 0.95,'
        b' "messages": [{"role": "user", "content": "caf\xc3\xa9"}]}'
    )

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw.test") as client:
            return await client.post("/v1/chat/completions", content=raw)

    assert asyncio.run(go()).status_code == 200
    sent = json.loads(seen[0])
    assert sent["seed"] == BIG and sent["top_p"] == 0.95
    assert sent["messages"][0]["content"] == "caf\u00e9"
