"""The SSE parser and timing of ChatClient; a MockTransport stands in for the server."""

import asyncio
import json

import httpx

from bench.client import ChatClient, ChatRequest, Clock, Target


def _sse(*events: dict | str) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


def _chunk(content: str, role: str | None = None) -> dict:
    delta = {"content": content} | ({"role": role} if role else {})
    return {"choices": [{"index": 0, "delta": delta}]}


USAGE = {
    "choices": [],
    "usage": {
        "prompt_tokens": 300,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 256},
    },
}


def _send(handler, request: ChatRequest | None = None, salt: str | None = "s1"):
    async def go():
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport) as http:
            client = ChatClient(http, Target("direct", "http://vllm"), "tiny", Clock(), salt)
            return await client.send(request or ChatRequest("w", "g", 0, [], max_tokens=3))

    return asyncio.run(go())


def test_stream_records_tokens_usage_and_cached_tokens():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["body"] = json.loads(request.content)
        body = _sse(
            _chunk("", role="assistant"), _chunk("a"), _chunk("b"), _chunk("c"), USAGE, "[DONE]"
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    record = _send(handler)
    assert record.ok
    assert len(record.chunk_times_s) == 3  # the role-only first chunk is not a token
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (300, 3, 256)
    assert record.recomputed_tokens == 44
    assert record.ttft_s is not None and record.ttft_s >= 0
    assert seen["body"]["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
    }
    assert seen["body"]["cache_salt"] == "s1"
    assert seen["body"]["ignore_eos"] is True


def _counted(content: str, generated: int, role: str | None = None) -> dict:
    return _chunk(content, role) | {"usage": {"prompt_tokens": 300, "completion_tokens": generated}}


def test_continuous_usage_counts_chunks_without_text_and_skips_the_role_chunk():
    def handler(request: httpx.Request) -> httpx.Response:
        events = (
            _counted("", 0, role="assistant"),  # sent at the first output, carries no token
            _counted("", 1),  # a token that decodes to no text yet
            _counted("ab", 3),  # two tokens in one chunk (speculative decoding)
            USAGE,
            "[DONE]",
        )
        return httpx.Response(200, content=_sse(*events))

    record = _send(handler)
    assert len(record.chunk_times_s) == 2
    assert record.completion_tokens == 3 and record.cached_tokens == 256


def test_missing_cached_tokens_is_none_not_zero():
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_sse(_chunk("x"), usage, "[DONE]"))

    assert _send(handler).cached_tokens is None


def test_http_error_becomes_a_failed_record():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "bad model"}})

    record = _send(handler)
    assert not record.ok
    assert "HTTP 400" in (record.error or "")
    assert "bad model" in (record.error or "")


def test_stream_without_usage_is_an_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_sse(_chunk("x"), "[DONE]"))

    record = _send(handler)
    assert "no usage chunk" in (record.error or "")


def test_tools_and_no_salt_in_body():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["body"] = json.loads(request.content)
        return httpx.Response(200, content=_sse(_chunk("x"), USAGE, "[DONE]"))

    tools = [{"type": "function", "function": {"name": "f"}}]
    _send(handler, ChatRequest("w", "g", 0, [], 1, tools=tools), salt=None)
    assert seen["body"]["tools"] == tools
    assert "cache_salt" not in seen["body"]
