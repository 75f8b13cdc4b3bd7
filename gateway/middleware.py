"""Pure-ASGI request accounting (never wraps or buffers the response body)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import (
    BadRequest,
    BodyTooLarge,
    GatewayError,
    HeadersTooLarge,
    Overloaded,
    Unauthorized,
)
from gateway.metrics import GatewayMetrics, status_class

# Status recorded when the client left before any response started.
CLIENT_CLOSED_STATUS = 499
SERVER_ERROR_STATUS = 500
# Request header limits (nginx's large_client_header_buffers default is 4 × 8 KiB):
# uvicorn with httptools enforces none, and every `x-*` header would reach vLLM.
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_COUNT = 100
_REASONS: tuple[tuple[type[GatewayError], str], ...] = (
    (Unauthorized, "unauthorized"),
    (BodyTooLarge, "body_too_large"),
    (HeadersTooLarge, "headers_too_large"),
    (BadRequest, "bad_request"),
)


def rejection_reason(error: GatewayError) -> str | None:
    """The `gateway_rejected_total` reason for an error the gateway raised itself
    (admission's own: `queue_full`, `queue_timeout`)."""
    if isinstance(error, Overloaded):
        return error.reason
    for kind, reason in _REASONS:
        if isinstance(error, kind):
            return reason
    return None


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


def headers_error(scope: Scope) -> HeadersTooLarge | None:
    """The 431 for a request with too many or too large headers, else None."""
    headers = scope["headers"]
    size = sum(len(name) + len(value) for name, value in headers)
    if len(headers) <= MAX_HEADER_COUNT and size <= MAX_HEADER_BYTES:
        return None
    return HeadersTooLarge(
        f"Request headers too large ({len(headers)} headers, {size} bytes); the gateway "
        f"accepts at most {MAX_HEADER_COUNT} headers and {MAX_HEADER_BYTES} bytes."
    )


async def send_json_error(send: Send, error: GatewayError) -> None:
    """Send `error` as a complete OpenAI-shaped JSON response."""
    body = error.body()
    headers = [(k.encode(), v.encode()) for k, v in error.headers().items()]
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
