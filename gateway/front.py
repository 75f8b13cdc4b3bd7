"""The proxied routes served from uvicorn's HTTP protocol, past the ASGI request cycle.

Under uvicorn (`python -m gateway`, and the test servers), `front_protocol(app)` is
uvicorn's own httptools protocol with one change: a request to one of the proxied
routes (`FastRoutes.match`) is handed to `FastRoutes.serve` by a `Front` instead of
going through the ASGI app.  Parsing, keep-alive, pipelining, flow control, limits
and graceful shutdown stay uvicorn's; what goes is measured per-request CPU, which
on a small machine is taken from vLLM (docs/gateway.md, "Overhead"):

- No watcher task per request for a client that leaves: the protocol sees the
  connection go (`connection_lost`) and cancels the request's task itself, which
  closes the upstream response so vLLM aborts the request.
- A JSON answer's head is written together with its body: one write and one
  wake-up of the client instead of two.  An event stream's head goes out at once, as
  vLLM sent it, before the first token: the client parses it while the token is
  computed (holding it for the token put the client's head parsing on the time to
  first token: measured, docs/gateway.md).
- The app and its dispatch are skipped; `send` writes HTTP/1.1 directly (the same
  framing and checks as uvicorn's).

Anything else, and anything the front does not take (an `Expect: 100-continue`
request, the access log switched on, uvicorn's concurrency limit answering), goes
to the ASGI app exactly as before.  The ASGI path (`GatewayApp.__call__`) serves the
same routes with the same code, a watcher task standing in for `connection_lost`;
it is what ASGI transports (httpx's `ASGITransport`) and other servers use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar, cast

from starlette.types import Message, Receive, Scope
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from gateway.fastroutes import FastRoutes

log = logging.getLogger(__name__)


def _nothing() -> None:
    pass


def _event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(
        name.lower() == b"content-type" and value.lower().startswith(b"text/event-stream")
        for name, value in headers
    )


class Front:
    """One request to a proxied route on one connection, and its HTTP/1.1 response."""

    __slots__ = ("_chunked", "_head", "_left", "_remaining", "armed", "cycle", "path", "task")

    def __init__(self, cycle: RequestResponseCycle, path: str) -> None:
        self.cycle = cycle
        self.path = path
        self.task: asyncio.Task[None] | None = None
        self.armed = False  # the response is being served: a leaving client cancels it
        self._left = False
        self._head: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self._chunked = True
        self._remaining = 0

    # -- the client leaving --
    def arm(self) -> bool:
        """From now on the client leaving cancels the task; False if it already left."""
        if self.cycle.disconnected:
            self._left = True
            return False
        self.armed = True
        return True

    def left(self) -> bool:
        return self._left

    def connection_lost(self) -> None:
        cycle = self.cycle
        if cycle.response_complete:
            return
        cycle.disconnected = True
        if self.armed and not self._left and self.task is not None:
            self._left = True
            self.task.cancel()

    # -- running it --
    async def run(self, routes: FastRoutes, done: Callable[[Front], None]) -> None:
        cycle = self.cycle
        try:
            scope, receive = cast(Scope, cycle.scope), cast(Receive, cycle.receive)
            await routes.serve(self.path, scope, receive, self.send, front=self)
        except asyncio.CancelledError:  # the server is shutting down
            if cycle.response_started and not cycle.response_complete:
                cycle.transport.close()
            raise
        except Exception:
            # FastRoutes.serve answers its own failures; this is a failure to answer.
            log.exception("unexpected error serving %s", self.path)
            if not cycle.response_started and not cycle.disconnected:
                await cycle.send_500_response()
            else:
                cycle.transport.close()
        else:
            if not cycle.response_complete and not cycle.disconnected:
                log.error("response to %s was not completed", self.path)
                cycle.transport.close()
        finally:
            cycle.on_response = _nothing
            done(self)

    # -- the response --
    async def send(self, message: Message) -> None:
        """ASGI `send` for this request, writing HTTP/1.1 straight to the transport."""
        cycle = self.cycle
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        kind = message["type"]
        if kind == "http.response.start" and not cycle.response_started:
            cycle.response_started = True
            headers = list(message.get("headers", ()))
            self._head = (message["status"], headers)
            if _event_stream(headers):
                # A stream's head goes out now, as vLLM sent it: the client parses
                # it while the first token is computed.
                cycle.transport.write(b"".join(self._encode_head()))
            return  # any other head goes out with the body, sent next
        if kind != "http.response.body" or not cycle.response_started or cycle.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} at this point of the response")
        body: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        out = self._encode_head() if self._head is not None else []
        if self._chunked:
            if body:
                out += [b"%x\r\n" % len(body), body, b"\r\n"]
            if not more:
                out.append(b"0\r\n\r\n")
        else:
            self._remaining -= len(body)
            if self._remaining < 0 or (not more and self._remaining):
                raise RuntimeError("response body does not match its content-length")
            out.append(body)
        if out:
            cycle.transport.write(b"".join(out))
        if not more:
            cycle.response_complete = True
            cycle.message_event.set()
            if not cycle.keep_alive:
                cycle.transport.close()
            cycle.on_response()

    def write_chunk(self, body: bytes) -> bool:
        """Write `body` as one chunk of a started chunked response, now, from a read
        callback (the relay's direct path); False when it cannot go out now (the
        head still pending, the client gone, closing or not reading, the response
        over) and must take the `send` path."""
        cycle = self.cycle
        if (
            self._head is not None
            or not self._chunked
            or not cycle.response_started
            or cycle.response_complete
            or cycle.disconnected
            or cycle.flow.write_paused
            or cycle.transport.is_closing()
        ):
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    def _encode_head(self) -> list[bytes]:
        """Status line and headers, as uvicorn's `send` writes them (default headers,
        the same checks, `connection: close` when the connection will close)."""
        assert self._head is not None
        status, headers = self._head
        self._head = None
        cycle = self.cycle
        out = [STATUS_LINE[status]]
        length: int | None = None
        headers = [*cycle.default_headers, *headers]
        # uvicorn's checks, one search over all names and one over all values.
        if HEADER_RE.search(b"".join([n for n, _ in headers])) or HEADER_VALUE_RE.search(
            b"".join([v for _, v in headers])
        ):
            raise RuntimeError(f"invalid response header in {headers!r}")
        for name, value in headers:
            name = name.lower()
            if name == b"content-length" and length is None:
                length = int(value)
            elif name == b"connection" and b"close" in value.lower():
                cycle.keep_alive = False
                continue  # added once below
            elif name == b"transfer-encoding":
                continue  # the framing is this server's
            out += [name, b": ", value, b"\r\n"]
        if not cycle.keep_alive:
            out.append(b"connection: close\r\n")
        if length is None and status not in (204, 304):
            out.append(b"transfer-encoding: chunked\r\n\r\n")
        else:
            self._chunked, self._remaining = False, length or 0
            out.append(b"\r\n")
        return out


class FrontProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the proxied routes served by a `Front`."""

    fast_routes: ClassVar[FastRoutes]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._front: Front | None = None
        # uvicorn writes access lines from its cycle (after its proxy-headers middleware
        # set the client address): with them on, every request takes the ASGI path.
        self._front_on = not (self.access_log and self.access_logger.isEnabledFor(logging.INFO))

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        path = None
        if self._front_on and app is self.app and not cycle.waiting_for_100_continue:
            path = self.fast_routes.match(cast(Scope, cycle.scope))
        if path is None:
            super()._start_asgi_task(cycle, app)
            return
        front = self._front = Front(cycle, path)
        task = front.task = self.loop.create_task(front.run(self.fast_routes, self._done))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def _done(self, front: Front) -> None:
        if self._front is front:
            self._front = None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._front is not None:
            self._front.connection_lost()


def front_protocol(fast_routes: FastRoutes) -> type[FrontProtocol]:
    """The protocol class to give uvicorn (`Config(http=...)`) for an app's routes."""
    return type("GatewayFrontProtocol", (FrontProtocol,), {"fast_routes": fast_routes})


# What the front uses of uvicorn's protocol beyond asyncio's interface (uvicorn is not
# pinned): with any of it gone, the gateway is served through its ASGI app instead.
UVICORN_HOOKS = ("_start_asgi_task", "on_response_complete", "connection_lost")
CYCLE_FIELDS = ("send_500_response", "run_asgi", "receive")


def front_supported() -> bool:
    return all(hasattr(HttpToolsProtocol, name) for name in UVICORN_HOOKS) and all(
        hasattr(RequestResponseCycle, name) for name in CYCLE_FIELDS
    )


def http_protocol(app: Any) -> type[asyncio.Protocol] | str:
    """uvicorn's `http` setting for `app`: the front for a gateway app, else httptools
    (also for a gateway app, with a warning, if this uvicorn lacks what the front uses)."""
    routes = getattr(app, "fast_routes", None)
    if not isinstance(routes, FastRoutes):
        return "httptools"
    if not front_supported():
        log.warning("uvicorn's httptools protocol has changed; serving without the front")
        return "httptools"
    return front_protocol(routes)
