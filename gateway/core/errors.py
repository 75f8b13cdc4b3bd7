"""The gateway's one exception base and its OpenAI-shaped error bodies.

Every failure the gateway reports to a client is a `GatewayError`; the app turns
it into `{"error": {"message", "type", "code"}}` with its status and headers, in
one place (`error_response`, or `send_json_error` for pure ASGI code).  No traceback
ever reaches a response body.  `rejection_reason` names the `gateway_rejected_total`
reason of an error the gateway raised itself.
"""

from __future__ import annotations

import json

from starlette.responses import Response
from starlette.types import Send

# Status recorded when the client left before any response started.
CLIENT_CLOSED_STATUS = 499
SERVER_ERROR_STATUS = 500


class GatewayError(Exception):
    """Base of every gateway error; subclasses fix status, type and code."""

    status_code = 500
    error_type = "server_error"
    code = "internal_error"

    def __init__(self, message: str, *, retry_after_seconds: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_seconds = retry_after_seconds

    def headers(self) -> dict[str, str]:
        if self.retry_after_seconds is None:
            return {}
        return {"retry-after": str(self.retry_after_seconds)}

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.error_type, "code": self.code}
        return json.dumps({"error": error}).encode()


class ConfigError(GatewayError):
    """Bad configuration: `python -m gateway` prints one line and exits 2."""

    code = "bad_configuration"


class BadRequest(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class Unauthorized(GatewayError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"

    def headers(self) -> dict[str, str]:
        return {"www-authenticate": "Bearer"}


class NotFound(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    """The request's `model` is not served here, or its key may not use it."""

    code = "model_not_found"

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.error_type, "param": "model"}
        return json.dumps({"error": {**error, "code": self.code}}).encode()


class MethodNotAllowed(GatewayError):
    status_code = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"


class BodyTooLarge(GatewayError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class HeadersTooLarge(GatewayError):
    status_code = 431
    error_type = "invalid_request_error"
    code = "request_headers_too_large"


class Overloaded(GatewayError):
    """Admission refused the request (`reason` is a bounded metric label)."""

    status_code = 429
    error_type = "rate_limit_error"
    code = "overloaded"

    def __init__(self, message: str, *, reason: str, retry_after_seconds: int) -> None:
        super().__init__(message, retry_after_seconds=retry_after_seconds)
        self.reason = reason


class MemoryLow(Overloaded):
    """The entrypoint's memory watchdog refuses work: available memory is under its
    floor (gateway/core/control.py). 503, since the server is short, not the client."""

    status_code = 503
    error_type = "server_error"
    code = "memory_low"


class UpstreamError(GatewayError):
    """vLLM could not be used; `kind` is a bounded metric label."""

    status_code = 502
    error_type = "upstream_error"
    code = "bad_gateway"
    kind = "protocol"


class UpstreamUnavailable(UpstreamError):
    status_code = 503
    code = "upstream_unavailable"
    kind = "connect"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    code = "upstream_timeout"
    kind = "timeout"


def error_response(error: GatewayError) -> Response:
    """The one translation of a `GatewayError` into an HTTP response."""
    return Response(
        error.body(),
        status_code=error.status_code,
        headers=error.headers(),
        media_type="application/json",
    )


_REASONS: tuple[tuple[type[GatewayError], str], ...] = (
    (Unauthorized, "unauthorized"),
    (BodyTooLarge, "body_too_large"),
    (HeadersTooLarge, "headers_too_large"),
    (ModelNotFound, "model_not_found"),
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
