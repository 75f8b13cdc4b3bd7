"""The proxied routes (`JSON_ROUTES`, the table of both faces) and the
one-count-per-request counter the embedded gateway uses (the standalone app counts
through its `RequestMetrics` middleware)."""

from __future__ import annotations

from dataclasses import dataclass

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


def route_table(json_paths: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """(method, path) → path of every proxied route: POST on the JSON ones, GET models."""
    return {("POST", path): path for path in json_paths} | {("GET", MODELS): MODELS}
