"""The `send` vLLM's handler gets from the embedded gateway (gateway/embedded/middleware.py).

It counts the response's status, adds the gateway's response headers, observes a
stream's token events as vLLM writes them (one whole `data:` event a message: the
hot path, on vLLM's loop), drops the usage chunk the gateway asked for, reads a
generation's JSON usage, and records the latencies and token counts at the end,
as the standalone gateway's relay does for a proxied response
(gateway/standalone/proxy.py).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import Message, Send

from gateway.core.forward import Forward, record_finish, usage_of
from gateway.core.metrics import GatewayMetrics
from gateway.core.routes import RequestCount
from gateway.core.sse import DONE_EVENT, EventSplitter, StreamObserver


class Relay:
    """The `send` vLLM's handler gets: counts the status, adds the gateway's response
    headers, observes a stream's events (dropping the usage chunk the gateway asked
    for) or a generation's JSON usage, and records the latencies at the end."""

    __slots__ = (
        "_body",
        "_count",
        "_forward",
        "_metrics",
        "_observer",
        "_send",
        "_splitter",
        "complete",
        "left_early",
    )

    def __init__(
        self, metrics: GatewayMetrics, forward: Forward, count: RequestCount, send: Send
    ) -> None:
        self._metrics = metrics
        self._forward = forward
        self._count = count
        self._send = send
        self._observer: StreamObserver | None = None
        # Made when a chunk is not one whole event (vLLM writes one event a message).
        self._splitter: EventSplitter | None = None
        self._body: list[bytes] | None = None  # a generation's JSON body, for its usage
        self.complete = False  # the response's last body message was sent
        self.left_early = False  # the client left while vLLM's handler ran

    async def __call__(self, message: Message) -> None:
        try:
            observer = self._observer
            if observer is not None and self._splitter is None and message.get("more_body", False):
                chunk: bytes = message.get("body", b"")
                if (  # one whole event, as vLLM writes each (`_one_event`, inlined)
                    chunk.startswith(b"data:")
                    and chunk.find(b"\n\n") == len(chunk) - 2
                    and b"\r" not in chunk
                ):
                    # The hot path, every token event on vLLM's loop: `observer.observe`'s
                    # timing of a token event inlined, which takes ~1.7 µs (~14 %) off what
                    # the gateway costs vLLM's API server per event under load; its test
                    # holds the two to the same figures.  The usage chunk the gateway
                    # asked for, [DONE] and anything else go through `observe`.
                    if b'"usage"' not in chunk and not chunk.startswith(DONE_EVENT):
                        now = time.monotonic()
                        last = observer.last_event_at
                        if last is None:
                            observer.first_event_at = now
                        else:
                            observer.on_gap(now - last)
                        observer.last_event_at = now
                        await self._send(message)
                        return
                    if observer.observe(chunk):
                        await self._send(message)
                    return
            if message["type"] != "http.response.body":
                if message["type"] == "http.response.start":
                    message = self._start(message)
                await self._send(message)
                return
            more: bool = message.get("more_body", False)
            if observer is not None:
                chunk = message.get("body", b"")
                if self._splitter is None and (not chunk or _one_event(chunk)):
                    # The last message: nothing, or one whole event ([DONE], the usage chunk).
                    if chunk and not observer.observe(chunk):
                        message = {**message, "body": b""}
                else:  # an event cut across messages, or several in one
                    out = self._events(observer, chunk, more)
                    if out is None:
                        return
                    if out is not chunk:
                        message = {**message, "body": out}
                if not more:
                    self._finish_stream(observer)
            elif self._body is not None:
                self._body.append(message.get("body", b""))
                if not more:
                    self._done(usage_of(200, b"".join(self._body)))
            await self._send(message)
            if not more:
                self.complete = True
        except OSError:
            # uvicorn's send on a connection the client closed (ASGI 2.4 has it raise;
            # Starlette's StreamingResponse turns that into ClientDisconnect).
            self.client_left()
            raise

    def client_left(self) -> None:
        """The client left while vLLM's handler ran: its disconnect listener heard it,
        or a send to it failed.  Even after the last body message: uvicorn drops what
        is sent to a closed connection, and vLLM may end an aborted stream itself (its
        last message sent) before its listener hears the disconnect."""
        self.left_early = True

    def _start(self, message: Message) -> Message:
        status: int = message["status"]
        self._count(status)
        forward = self._forward
        headers = list(message.get("headers", ()))
        headers += [(k.encode(), v.encode()) for k, v in forward.extra_headers.items()]
        if forward.stream and _event_stream(headers):
            gaps = self._metrics.inter_token_latency
            self._observer = StreamObserver(forward.drop_usage, gaps.observe, gaps.observe_zeros)
        elif forward.generation:
            self._body = [] if status == 200 else None
            if status != 200:
                self._done(None)
        return {**message, "headers": headers}

    def _events(self, observer: StreamObserver, chunk: bytes, more: bool) -> bytes | None:
        """What to send of a chunk that is not one whole event (an event cut across
        messages, several in one), or None to send nothing mid-stream (the injected
        usage chunk dropped).  From the first such chunk on, the stream goes through
        the splitter."""
        if self._splitter is None:
            self._splitter = EventSplitter()
        splitter = self._splitter
        out = b"".join([e for e in splitter.feed(chunk) if observer.observe(e)])
        if not more:
            out += splitter.rest()
        elif not out:
            return None
        return chunk if out == chunk else out

    def _finish_stream(self, observer: StreamObserver) -> None:
        if observer.first_event_at is not None:
            self._metrics.ttft.observe(observer.first_event_at - self._forward.started)
        self._done(observer.usage)

    def _done(self, usage: dict[str, Any] | None) -> None:
        record_finish(self._metrics, self._forward, usage)


def _one_event(chunk: bytes) -> bool:
    """`chunk` is one whole `data:` event with LF line ends: its first blank line is
    its end (JSON has no raw line breaks), and no CR could make it two."""
    return (
        chunk.startswith(b"data:") and chunk.find(b"\n\n") == len(chunk) - 2 and b"\r" not in chunk
    )


def _event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.startswith(b"text/event-stream")
    return False
