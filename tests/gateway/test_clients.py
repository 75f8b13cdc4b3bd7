"""The upstream clients over real sockets: bodies as they arrive, failures → gateway errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from gateway.core.errors import ConfigError, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.standalone.clients import AiohttpUpstream
from gateway.standalone.settings import load_settings
from gateway.standalone.upstream import UpstreamClient, make_upstream_client
from tests.gateway.conftest import MakeSettings
from tests.gateway.httpx_upstream import HttpxUpstream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CLIENTS = ("aiohttp", "httpx")


def _client(kind: str, read_timeout_seconds: float = 5.0) -> UpstreamClient:
    timeouts = {"connect_timeout_seconds": 2.0, "read_timeout_seconds": read_timeout_seconds}
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


@pytest.mark.parametrize("urls", ["http://vllm:8000", "http://a:8000,https://b:8443"])
def test_the_data_plane_is_aiohttp(make_settings: MakeSettings, urls: str) -> None:
    assert type(make_upstream_client(make_settings(upstream_url=urls))) is AiohttpUpstream


@pytest.mark.parametrize("removed", ["httptools", "httpx"])
def test_a_removed_client_is_refused_naming_what_is_left(removed: str) -> None:
    expected = f"GATEWAY_UPSTREAM_CLIENT={removed!r}: .*allowed: aiohttp"
    with pytest.raises(ConfigError, match=expected):
        load_settings(upstream_url="http://vllm:8000", upstream_client=removed)


OK_RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.mark.parametrize("closes", [1, 2])
def test_a_pooled_connection_closed_before_the_answer_is_tried_once_more(closes: int) -> None:
    """The server answers a request, keeps the connection, then closes it on the next
    one without a byte (a keep-alive race, or a replica that died): aiohttp sends it
    again on a new connection; a second close without an answer is a 503."""
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        if len(connections) == 1:  # the first: answer, keep it open, drop the next
            writer.write(OK_RESPONSE)
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")
        if len(connections) > closes and len(connections) > 1:
            writer.write(OK_RESPONSE)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def go() -> list[bytes]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
        client = _client("aiohttp")
        bodies = []
        try:
            for _ in range(2):
                response = await client.send("POST", url, [], b"{}")
                bodies.append(b"".join([chunk async for chunk in response.chunks()]))
                await response.aclose()
        finally:
            await client.aclose()
            server.close()
            await server.wait_closed()
        return bodies

    if closes == 1:
        assert asyncio.run(go()) == [b"ok", b"ok"]
        assert len(connections) == 2
    else:
        with pytest.raises(UpstreamUnavailable):
            asyncio.run(go())
