"""The upstream clients over real sockets: bodies as they arrive, failures → gateway errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from gateway.clients import AiohttpUpstream, HttpxUpstream
from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.h1client import HttptoolsUpstream
from gateway.upstream import UpstreamClient, make_upstream_client
from tests.gateway.conftest import MakeSettings

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CLIENTS = ("httptools", "aiohttp", "httpx")


def _client(kind: str, read_timeout_seconds: float = 5.0) -> UpstreamClient:
    timeouts = {"connect_timeout_seconds": 2.0, "read_timeout_seconds": read_timeout_seconds}
    if kind == "httptools":
        return HttptoolsUpstream(**timeouts, retry_after_seconds=3)
    if kind == "aiohttp":
        return AiohttpUpstream(**timeouts, retry_after_seconds=3)
    return HttpxUpstream(None, **timeouts, retry_after_seconds=3)


async def _with_server(
    handler: Handler, kind: str, read_timeout_s: float = 5.0, seen: list[bytes] | None = None
) -> None:
    seen = [] if seen is None else seen
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = _client(kind, read_timeout_s)
    try:
        response = await client.send("POST", f"http://127.0.0.1:{port}/x", [], b"{}")
        try:
            async for chunk in response.chunks():
                seen.append(chunk)
        finally:
            await response.aclose()
    finally:
        await client.aclose()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def _sse_then_cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        b"9\r\ndata: a\n\n\r\n"
    )
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()  # no terminating chunk: the stream was cut


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(1)


@pytest.mark.parametrize("kind", CLIENTS)
def test_chunks_arrive_then_a_cut_stream_is_a_502(kind: str) -> None:
    seen: list[bytes] = []
    with pytest.raises(UpstreamError) as caught:
        asyncio.run(_with_server(_sse_then_cut, kind, seen=seen))
    assert b"".join(seen) == b"data: a\n\n"
    assert type(caught.value) is UpstreamError and caught.value.status_code == 502


@pytest.mark.parametrize("kind", CLIENTS)
def test_connection_refused_is_503_with_retry_after(kind: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused

        async def go() -> None:
            client = _client(kind)
            try:
                await client.send("GET", f"http://127.0.0.1:{port}/health", [], None)
            finally:
                await client.aclose()

        with pytest.raises(UpstreamUnavailable) as caught:
            asyncio.run(go())
    assert caught.value.headers() == {"retry-after": "3"}


@pytest.mark.parametrize("kind", CLIENTS)
def test_silence_past_the_read_timeout_is_504(kind: str) -> None:
    with pytest.raises(UpstreamTimeout):
        asyncio.run(_with_server(_silent, kind, read_timeout_s=0.2))


@pytest.mark.parametrize(
    ("urls", "choice", "expected"),
    [
        ("http://vllm:8000", "httptools", HttptoolsUpstream),
        ("http://a:8000,https://b:8443", "httptools", AiohttpUpstream),  # TLS: aiohttp
        ("http://vllm:8000", "aiohttp", AiohttpUpstream),
        ("https://vllm:8443", "httpx", HttpxUpstream),
    ],
)
def test_the_upstream_client_choice(
    make_settings: MakeSettings, urls: str, choice: str, expected: type
) -> None:
    settings = make_settings(upstream_url=urls, upstream_client=choice)
    assert type(make_upstream_client(settings, None)) is expected
