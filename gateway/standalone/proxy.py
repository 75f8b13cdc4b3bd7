"""Forwarding one request to vLLM: admission, the upstream call, the relay.

`ProxyResponse` is the ASGI response a route returns.  When the server runs
it, it waits for an admission slot, sends the request upstream, then passes
status and headers through and relays the body: SSE event by event as soon as
each is complete (never the whole stream), anything else as one body.  A
client disconnect cancels the work and closes the upstream response, so vLLM
aborts the request and frees its KV blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.core.admission import Slots
from gateway.core.errors import GatewayError, Overloaded, UpstreamError, UpstreamUnavailable
from gateway.core.forward import Forward, record_finish, usage_of
from gateway.core.headers import response_headers
from gateway.core.metrics import GatewayMetrics
from gateway.core.sse import DONE_EVENT, EventSplitter, StreamObserver, plain_head
from gateway.standalone.replicas import Replica
from gateway.standalone.upstream import Upstream, UpstreamResponse

# `gateway_upstream_requests_total` outcome of an exchange that completed.
OK = "ok"


@dataclass(frozen=True)
class ProxyDeps:
    """What every forwarded request shares (built once by `create_app`)."""

    upstream: Upstream
    admission: Slots
    metrics: GatewayMetrics
    retry_after_seconds: int


async def send_error(send: Send, error: GatewayError) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in error.headers().items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": error.body()})


def sse_error_event(error: GatewayError) -> bytes:
    return b"data: " + error.body() + b"\n\n"


def _no_status(status: int) -> None:
    pass


class ProxyResponse(Response):
    """An ASGI response that performs the upstream exchange when it is sent.

    `on_status` is called with the status code just before the response starts
    (the embedded gateway counts requests with it instead of wrapping `send`)."""

    def __init__(
        self, deps: ProxyDeps, forward: Forward, on_status: Callable[[int], None] = _no_status
    ) -> None:
        self.deps = deps
        self.forward = forward
        self.status_code = 200
        self.background = None
        self.on_status = on_status
        self._complete = False  # the final body message is being (or was) sent
        self._done_relayed = False  # the stream's `data: [DONE]` went to the client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # One plain task watches for the client leaving and cancels this one: cheaper
        # per request than a task group, and the cancellation closes the upstream.
        this = asyncio.current_task()
        assert this is not None
        watcher = asyncio.get_running_loop().create_task(self._watch(receive, this))
        try:
            await self.serve_cancellable(
                send, lambda: watcher.done() and not watcher.cancelled() and watcher.result()
            )
        finally:
            watcher.cancel()

    async def serve_cancellable(self, send: Send, client_left: Callable[[], bool]) -> None:
        """Serve the response; whoever sees the client leave cancels this task, and
        `client_left()` then says so (a cancellation from anywhere else propagates)."""
        try:
            await self._admit_and_serve(send)
        except asyncio.CancelledError:
            if not client_left():
                raise  # cancelled from outside (server shutdown), not by the client leaving
            this = asyncio.current_task()
            assert this is not None
            this.uncancel()
        finally:
            self.forward.done()

    async def _watch(self, receive: Receive, task: asyncio.Task[Any]) -> bool:
        """Wait for the client to leave, then cancel `task` unless the response was
        complete (uvicorn answers `http.disconnect` to every receive after that)."""
        while (await receive())["type"] != "http.disconnect":
            pass
        if self._complete:
            return False
        task.cancel()
        return True

    async def _send_error(self, send: Send, error: GatewayError) -> None:
        self.on_status(error.status_code)
        self._complete = True
        await send_error(send, error)

    async def _admit_and_serve(self, send: Send) -> None:
        deps, key = self.deps, self.forward.principal.key_id
        try:
            waited = await deps.admission.acquire(key)
        except Overloaded as exc:
            deps.metrics.rejected.labels(exc.reason).inc()
            await self._send_error(send, exc)
            return
        deps.metrics.queue_wait.observe(waited)
        deps.metrics.in_flight.inc()
        try:
            await self._exchange(send)
        finally:
            deps.metrics.in_flight.dec()
            deps.admission.release(key)

    async def _exchange(self, send: Send) -> None:
        """Try the replicas in the router's order until one takes the request."""
        error: UpstreamError = UpstreamUnavailable(
            "No model server replica is configured.",
            retry_after_seconds=self.deps.retry_after_seconds,
        )
        for replica in await self.deps.upstream.replicas.order(self.forward.affinity):
            try:
                await self._exchange_with(replica, send)
                return
            except UpstreamUnavailable as exc:  # nothing reached vLLM: the next one may serve
                error = exc
        await self._fail(send, error)

    async def _exchange_with(self, replica: Replica, send: Send) -> None:
        fwd, upstream = self.forward, self.deps.upstream
        headers = [*fwd.headers, *upstream.headers.items()]
        upstream.replicas.started(replica)
        outcome = "cancelled"
        try:
            try:
                response = await upstream.client.send(
                    fwd.method, replica.base_url + fwd.path, headers, fwd.body
                )
            except UpstreamUnavailable as exc:
                outcome = exc.kind
                upstream.replicas.mark(replica, healthy=False, why="a request could not connect")
                raise
            except UpstreamError as exc:
                outcome = exc.kind
                await self._fail(send, exc)
                return
            try:
                if fwd.stream and response.content_type.startswith("text/event-stream"):
                    outcome = await self._relay_events(response, send)
                else:
                    outcome = await self._relay_body(response, send)
            finally:
                # Cancellation (the client left) was already delivered; aclose closes
                # the upstream connection, so vLLM aborts the request.
                await response.aclose()
        finally:
            # A client that leaves once it has read [DONE] was served in full.
            if outcome == "cancelled" and self._done_relayed:
                outcome = OK
            upstream.replicas.finished(replica, outcome)

    async def _fail(self, send: Send, error: UpstreamError) -> None:
        self.deps.metrics.upstream_errors.labels(error.kind).inc()
        await self._send_error(send, error)

    def _start(self, response: UpstreamResponse) -> dict[str, Any]:
        headers = response_headers(response.raw_headers)
        headers += [(k.encode(), v.encode()) for k, v in self.forward.extra_headers.items()]
        return {"type": "http.response.start", "status": response.status, "headers": headers}

    async def _relay_body(self, response: UpstreamResponse, send: Send) -> str:
        try:
            body = b"".join([chunk async for chunk in response.chunks()])
        except UpstreamError as exc:
            await self._fail(send, exc)
            return exc.kind
        start = self._start(response)
        start["headers"].append((b"content-length", str(len(body)).encode()))
        if self.forward.generation:
            self._finish(usage_of(response.status, body))
        self.on_status(response.status)
        self._complete = True
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return OK

    async def _relay_events(self, response: UpstreamResponse, send: Send) -> str:
        metrics, outcome = self.deps.metrics, OK
        gaps = metrics.inter_token_latency
        observer = StreamObserver(self.forward.drop_usage, gaps.observe, gaps.observe_zeros)
        splitter = EventSplitter()
        self.on_status(response.status)
        await send(self._start(response))
        out = b""
        try:
            while (chunk := await response.next_chunk()) is not None:
                head = plain_head(chunk) if splitter.idle else 0
                if head:
                    observer.tick(chunk.count(b"\n\n", 0, head))  # forwarded untouched
                if head == len(chunk):
                    out = chunk
                else:
                    rest = [e for e in splitter.feed(chunk[head:]) if observer.observe(e)]
                    out = b"".join([chunk[:head], *rest]) if head else b"".join(rest)
                if response.ended():
                    break  # the last bytes go out with the end of the response
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                    self._done_relayed = self._done_relayed or DONE_EVENT in out
                    out = b""
            tail = out + splitter.rest()
        except UpstreamError as error:
            metrics.upstream_errors.labels(error.kind).inc()
            tail, outcome = splitter.rest() + sse_error_event(error), error.kind
        if observer.first_event_at is not None:
            metrics.ttft.observe(observer.first_event_at - self.forward.started)
        self._finish(observer.usage)
        self._complete = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return outcome

    def _finish(self, usage: dict[str, Any] | None) -> None:
        record_finish(self.deps.metrics, self.forward, usage)
