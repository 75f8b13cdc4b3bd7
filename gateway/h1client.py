"""`HttptoolsUpstream`: a minimal HTTP/1.1 client for the data plane to vLLM.

The gateway only ever talks to vLLM's own uvicorn over plain HTTP/1.1, one request
per connection at a time, and mostly relays SSE streams.  For that, aiohttp's
request pipeline (auto headers, cookie jar, tracing, redirects, multipart, ...)
costs more CPU per request than everything else the gateway does (py-spy,
docs/gateway.md "Overhead").  This client writes each request in one `write`,
parses responses with httptools (the C parser uvicorn itself uses), hands body
chunks to the reader as they arrive, and keeps idle keep-alive connections per
host.  Flow control is bounded: past `HIGH_WATER_BYTES` unread, the socket stops
being read until the relay catches up, so a slow client never grows memory.

Failures are translated once into the gateway's errors, as the other two clients
do: connect → 503 (with Retry-After), read timeout → 504, anything else (a cut
stream, a connection closed before the response, a malformed response) → 502.
A request on a reused idle connection that the server had already closed (its
keep-alive timeout) is retried once on a fresh connection, as nothing of it
reached vLLM.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable, Sequence
from functools import lru_cache
from typing import cast
from urllib.parse import urlsplit

import httptools

from gateway.clients import broken, timed_out, unavailable

# Unread body bytes past which the socket is paused, and the level to resume at.
HIGH_WATER_BYTES = 256 * 1024
LOW_WATER_BYTES = 64 * 1024
# Idle keep-alive connections kept per upstream (admission bounds the busy ones).
MAX_IDLE_PER_HOST = 256

# Takes a body chunk straight from the read callback; False leaves it to the reader.
Sink = Callable[[bytes], bool]


class _Broken(Exception):
    """The connection failed; `before_response` when no byte of a response came."""

    def __init__(self, reason: str, *, before_response: bool) -> None:
        super().__init__(reason)
        self.before_response = before_response


@lru_cache(maxsize=64)
def _split(url: str) -> tuple[str, int, str, bytes]:
    """(host, port, authority, request target) of an http:// URL."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// upstream URLs are supported, not {url!r}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, parts.netloc, target.encode("latin-1")


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; callbacks are httptools' parser hooks."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        # One lazily re-armed read timer instead of a timer per wait: a token stream
        # waits once per event, and a timer handle each time is measurable CPU.
        self._deadline = 0.0
        self._timeout_s = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self._interim = False
        self.complete = False
        self.keep_alive = False
        self.error: _Broken | None = None
        self._received_any = False
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self.sink: Sink | None = None
        self._batch: list[bytes] | None = None  # body read by this data_received, for `sink`

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self._received_any = True
        # With a sink, the body of one read is collected and offered to it once, as
        # one chunk: one write downstream for several events that arrived together.
        self._batch = [] if self.sink is not None else None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._flush_batch(offer=False)
            self._fail(f"malformed response from the model server ({exc})")
            self.abort()
            return
        # The end of the response in this read too: all of it is left to the reader,
        # which writes the last events and the end of the response together.
        self._flush_batch(offer=not self.complete)

    def _flush_batch(self, *, offer: bool) -> None:
        batch, self._batch = self._batch, None
        if not batch:
            return
        body = batch[0] if len(batch) == 1 else b"".join(batch)
        sink = self.sink
        if offer and sink is not None and not self._chunks and sink(body):
            # Passed on from here, without waking the reader: data counts as progress.
            if self._loop is not None:
                self._deadline = self._loop.time() + self._timeout_s
            return
        self._buffer(body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            self._fail("the model server closed the connection mid-response")

    # -- httptools callbacks --
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # informational (100 Continue, 103 Early Hints): skipped
            self._interim = True
            self.headers = []
            return
        self.status = status
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        batch = self._batch
        if batch is not None and not self._chunks:
            batch.append(body)  # offered to the sink once the whole read is parsed
        else:
            self._buffer(body)

    def _buffer(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER_BYTES and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:  # the final response follows on the same connection
            self._interim = False
            return
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        self._wake()

    # -- used by the client --
    def _fail(self, reason: str) -> None:
        if self.error is None:
            self.error = _Broken(reason, before_response=not self._received_any)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, timeout_s: float) -> None:
        """Until the parser has news; TimeoutError after `timeout_s` without any."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._timeout_s = timeout_s
        self._deadline = loop.time() + timeout_s
        if self._watchdog is None:
            self._watchdog = loop.call_at(self._deadline, self._check_deadline, loop)
        try:
            await waiter
        finally:
            self._waiter = None

    def _check_deadline(self, loop: asyncio.AbstractEventLoop) -> None:
        self._watchdog = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms the timer again
        if loop.time() >= self._deadline:
            waiter.set_exception(TimeoutError())
        else:
            self._watchdog = loop.call_at(self._deadline, self._check_deadline, loop)

    def start(self, request: bytes) -> None:
        self._reset()
        self._parser = httptools.HttpResponseParser(self)
        assert self.transport is not None
        self.transport.write(request)

    async def response_head(self, timeout_s: float) -> None:
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            await self._wait(timeout_s)

    async def next_chunk(self, timeout_s: float) -> bytes | None:
        """The next body bytes (all that arrived), or None at the end of the response."""
        while not self._chunks:
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            await self._wait(timeout_s)
        chunk = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.error is None

    def abort(self) -> None:
        self.closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self.transport is not None:
            self.transport.close()


class HttptoolsResponse:
    def __init__(self, client: HttptoolsUpstream, key: tuple[str, int], conn: _Connection) -> None:
        self._client = client
        self._key = key
        self._conn = conn
        self.status = conn.status
        self.raw_headers: Sequence[tuple[bytes, bytes]] = conn.headers
        self.content_type = ""
        for name, value in conn.headers:
            if name.lower() == b"content-type":
                self.content_type = value.decode("latin-1")
        self._released = False

    async def next_chunk(self) -> bytes | None:
        try:
            return await self._conn.next_chunk(self._client.read_timeout_seconds)
        except TimeoutError:
            raise timed_out() from None
        except _Broken as exc:
            raise broken(str(exc)) from None

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self.next_chunk()) is not None:
            yield chunk

    def relay(self, sink: Sink | None) -> None:
        """From now on, offer the body bytes of each read to `sink` as one chunk, while
        nothing is buffered for `next_chunk`; what it takes is not returned by
        `next_chunk` (None: stop).  A read that ends the response is left to
        `next_chunk`.  Order is kept: once a chunk is buffered, so is every later one
        until the reader took them."""
        self._conn.sink = sink

    def ended(self) -> bool:
        conn = self._conn
        return conn.complete and not conn._chunks and conn.error is None

    async def aclose(self) -> None:
        # A response read to its end goes back to the pool; one cut short is closed,
        # so vLLM sees the disconnect and aborts the request.
        if self._released:
            return
        self._released = True
        self._conn.sink = None
        if self._conn.reusable():
            self._client.release(self._key, self._conn)
        else:
            self._conn.abort()


class HttptoolsUpstream:
    """HTTP/1.1 to vLLM over httptools with per-host keep-alive connections."""

    def __init__(
        self,
        *,
        connect_timeout_seconds: float,
        read_timeout_seconds: float,
        retry_after_seconds: int,
    ) -> None:
        self.connect_timeout_seconds = connect_timeout_seconds
        self.read_timeout_seconds = read_timeout_seconds
        self._retry_after = retry_after_seconds
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connect(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_seconds):
                _, conn = await loop.create_connection(_Connection, host, port)
        except (OSError, TimeoutError):
            raise unavailable(self._retry_after) from None
        return conn

    def _pooled(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    def release(self, key: tuple[str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < MAX_IDLE_PER_HOST:
            idle.append(conn)
        else:
            conn.abort()

    async def send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> HttptoolsResponse:
        host, port, authority, target = _split(url)
        lines = [f"{method} ".encode() + target + b" HTTP/1.1", b"host: " + authority.encode()]
        lines += [f"{name}: {value}".encode("latin-1") for name, value in headers]
        if body is not None:
            lines.append(b"content-length: %d" % len(body))
        request = b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")
        key = (host, port)
        conn = self._pooled(key)
        if conn is not None:
            try:
                return await self._exchange(key, conn, request)
            except _Broken as exc:
                if not exc.before_response:
                    raise broken(str(exc)) from None
            # The idle connection had been closed by the server: nothing reached vLLM.
        conn = await self._connect(host, port)
        try:
            return await self._exchange(key, conn, request)
        except _Broken as exc:
            raise broken(str(exc)) from None

    async def _exchange(
        self, key: tuple[str, int], conn: _Connection, request: bytes
    ) -> HttptoolsResponse:
        conn.start(request)
        try:
            await conn.response_head(self.read_timeout_seconds)
        except TimeoutError:
            conn.abort()
            raise timed_out() from None
        except BaseException:
            conn.abort()
            raise
        return HttptoolsResponse(self, key, conn)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
        self._idle.clear()
        await asyncio.sleep(0)
