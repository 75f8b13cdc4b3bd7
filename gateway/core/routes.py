"""The proxied routes (`JSON_ROUTES`, the table of both faces), the
one-count-per-request counter and the refusal both faces' proxied routes use (the
standalone app's other routes count through its `RequestMetrics` middleware)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Send

from gateway.core.errors import GatewayError, rejection_reason, send_json_error
from gateway.core.metrics import GatewayMetrics, status_class
from gateway.core.prepare import MODELS

JSON_ROUTES = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/tokenize",
)


@dataclass
class RequestCount:
    """Counts one request exactly once, by the first status it is given."""

    metrics: GatewayMetrics
    route: str
    done: bool = False

    def __call__(self, status: int) -> None:
        if not self.done:
            self.done = True
            self.metrics.requests.labels(self.route, status_class(status)).inc()


async def refuse(send: Send, count: RequestCount, error: GatewayError) -> None:
    """Answer a proxied route's request with `error`: its `gateway_rejected_total`
    reason (when it has one), the request's count, the OpenAI-shaped body."""
    reason = rejection_reason(error)
    if reason is not None:
        count.metrics.rejected.labels(reason).inc()
    count(error.status_code)
    await send_json_error(send, error)


def route_table(json_paths: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """(method, path) → path of every proxied route: POST on the JSON ones, GET models."""
    return {("POST", path): path for path in json_paths} | {("GET", MODELS): MODELS}
