"""The standalone app's pure-ASGI request accounting and header limits (never wraps or
buffers the response body)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.errors import (
    CLIENT_CLOSED_STATUS,
    SERVER_ERROR_STATUS,
    send_json_error,
)
from gateway.core.headers import headers_error
from gateway.core.metrics import GatewayMetrics, status_class


class RequestMetrics:
    """Counts every HTTP response by route template and status class."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        def count(status: int) -> None:
            route = getattr(scope.get("route"), "path", "other")
            self.metrics.requests.labels(route, status_class(status)).inc()

        async def note_status(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                count(message["status"])  # before the client can see the response
            await send(message)

        try:
            await self.app(scope, receive, note_status)
        except Exception:
            if not started:
                started = True
                count(SERVER_ERROR_STATUS)  # ServerErrorMiddleware answers 500
            raise
        finally:
            if not started:
                count(CLIENT_CLOSED_STATUS)


class HeaderLimits:
    """431 with an OpenAI-shaped body for too many or too large request headers."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = headers_error(scope)
            if error is not None:
                self.metrics.rejected.labels("headers_too_large").inc()
                await send_json_error(send, error)
                return
        await self.app(scope, receive, send)
