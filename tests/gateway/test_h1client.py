"""`HttptoolsUpstream` over real sockets: keep-alive reuse, a stale pooled connection,
bounded buffering for a slow reader, and uvloop's transports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import uvloop

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.h1client import HIGH_WATER_BYTES, HttptoolsUpstream
from tests.gateway.server import Handler, RawServer

LOOPS = ("asyncio", "uvloop")
OK_BODY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def _run(loop: str, coro: Coroutine[Any, Any, None]) -> None:
    if loop == "uvloop":
        uvloop.run(coro)
    else:
        asyncio.run(coro)


def _client() -> HttptoolsUpstream:
    return HttptoolsUpstream(
        connect_timeout_seconds=2.0, read_timeout_seconds=5.0, retry_after_seconds=3
    )


async def _serve(handler: Handler) -> tuple[RawServer, str]:
    server = RawServer(handler)
    return server, await server.start()


@contextlib.asynccontextmanager
async def _served(handler: Handler) -> AsyncIterator[tuple[HttptoolsUpstream, str]]:
    """A client and the URL of a test server running `handler`; both closed after."""
    server, url = await _serve(handler)
    client = _client()
    try:
        yield client, url
    finally:
        await client.aclose()
        await server.close()


async def _get(client: HttptoolsUpstream, url: str) -> tuple[int, bytes]:
    response = await client.send("POST", url + "/v1/x", [("x-a", "1")], b"{}")
    try:
        body = b"".join([chunk async for chunk in response.chunks()])
    finally:
        await response.aclose()
    return response.status, body


@pytest.mark.parametrize("loop", LOOPS)
def test_keep_alive_connection_is_reused(loop: str) -> None:
    connections: list[int] = []
    requests: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            requests.append(head + await reader.readexactly(2))
            writer.write(OK_BODY)
            await writer.drain()
        writer.close()

    async def go() -> None:
        async with _served(handler) as (client, url):
            for _ in range(3):
                assert await _get(client, url) == (200, b"{}")

    _run(loop, go())
    assert len(connections) == 1 and len(requests) == 3
    head = requests[0].split(b"\r\n")
    assert head[0] == b"POST /v1/x HTTP/1.1"
    assert b"x-a: 1" in head and b"content-length: 2" in head and requests[0].endswith(b"{}")


@pytest.mark.parametrize("loop", LOOPS)
def test_informational_responses_are_skipped(loop: str) -> None:
    """A `100 Continue` or `103 Early Hints` before the answer is not the answer."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n" + OK_BODY)
        await writer.drain()
        await reader.read()
        writer.close()

    async def go() -> None:
        async with _served(handler) as (client, url):
            response = await client.send("POST", url + "/v1/x", [], b"{}")
            try:
                body = b"".join([chunk async for chunk in response.chunks()])
            finally:
                await response.aclose()
            assert (response.status, body) == (200, b"{}")
            assert [name for name, _ in response.raw_headers] == [
                b"content-type",
                b"content-length",
            ]

    _run(loop, go())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_pooled_connection_the_server_closed_is_replaced(loop: str) -> None:
    """uvicorn closes idle keep-alive connections (5 s); a request that meets such a
    connection is sent again on a fresh one, as none of it reached the server."""
    connections: list[asyncio.StreamWriter] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(OK_BODY)  # keep-alive by HTTP/1.1 default, then closed anyway
        await writer.drain()
        writer.close()

    async def go() -> None:
        async with _served(handler) as (client, url):
            assert await _get(client, url) == (200, b"{}")
            await asyncio.sleep(0.05)  # the close reaches the pooled connection
            assert await _get(client, url) == (200, b"{}")

    _run(loop, go())
    assert len(connections) == 2


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_closing_as_the_request_goes_out_is_retried_once(loop: str) -> None:
    """The race the pool cannot see coming: the server closes its idle end just as the
    next request is written, with no byte of a response.  The request goes again on a
    fresh connection; a fresh connection that does the same is a 502."""
    served: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        if served:  # a second request on this connection: hang up without an answer
            writer.close()
            return
        served.append(1)
        writer.write(OK_BODY)
        await writer.drain()
        try:
            await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return
        writer.close()

    async def go() -> None:
        async with _served(handler) as (client, url):
            assert await _get(client, url) == (200, b"{}")
            served.clear()  # the retry's fresh connection answers
            assert await _get(client, url) == (200, b"{}")
            served.append(1)  # now every connection hangs up: no endless retries
            with pytest.raises(UpstreamError) as caught:
                await _get(client, url)
            assert caught.value.status_code == 502

    _run(loop, go())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_slow_reader_pauses_the_socket(loop: str) -> None:
    """An upstream that sends faster than the relay reads is not buffered without
    bound: past the high-water mark the client stops reading the socket."""
    total = 32 * HIGH_WATER_BYTES
    piece = b"x" * 65536

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        for _ in range(total // len(piece)):
            writer.write(piece)
            await writer.drain()
        writer.close()

    async def go() -> None:
        async with _served(handler) as (client, url):
            response = await client.send("POST", url + "/x", [], b"{}")
            received = 0
            largest_buffer = 0
            while (chunk := await response.next_chunk()) is not None:
                received += len(chunk)
                largest_buffer = max(largest_buffer, len(chunk))
                await asyncio.sleep(0.01)  # a slow client downstream
            await response.aclose()
            assert received == total
            # One read of the socket may land past the mark before reading pauses.
            assert largest_buffer <= HIGH_WATER_BYTES + 1024 * 1024

    _run(loop, go())


def test_an_unsupported_url_scheme_is_refused() -> None:
    async def go() -> None:
        await _client().send("GET", "https://example.invalid/x", [], None)

    with pytest.raises(ValueError, match="only http://"):
        asyncio.run(go())


def test_a_malformed_response_is_a_502() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()

    async def go() -> None:
        async with _served(handler) as (client, url):
            await client.send("POST", url + "/x", [], b"{}")

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(go())
    assert caught.value.status_code == 502


def _ticking(events: int, gap_s: float, then_silent_s: float = 0.0) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(events):
            writer.write(b"9\r\ndata: a\n\n\r\n")
            await writer.drain()
            await asyncio.sleep(gap_s)
        await asyncio.sleep(then_silent_s)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return handler


async def _read_all(url: str, read_timeout_s: float) -> int:
    client = HttptoolsUpstream(
        connect_timeout_seconds=2.0, read_timeout_seconds=read_timeout_s, retry_after_seconds=3
    )
    try:
        response = await client.send("POST", url + "/x", [], b"{}")
        received = 0
        while (chunk := await response.next_chunk()) is not None:
            received += len(chunk)
        await response.aclose()
        return received
    finally:
        await client.aclose()


@pytest.mark.parametrize("loop", LOOPS)
def test_the_read_timeout_is_per_wait_not_per_stream(loop: str) -> None:
    """A stream that ticks more often than the read timeout lasts as long as it
    likes; one that then falls silent for longer than it is cut with a 504."""

    async def go() -> None:
        server, url = await _serve(_ticking(12, 0.05))
        try:
            assert await _read_all(url, read_timeout_s=0.2) == 12 * len(b"data: a\n\n")
        finally:
            await server.close()
        server, url = await _serve(_ticking(2, 0.05, then_silent_s=1.0))
        try:
            with pytest.raises(UpstreamTimeout):
                await _read_all(url, read_timeout_s=0.2)
        finally:
            await server.close()

    _run(loop, go())
