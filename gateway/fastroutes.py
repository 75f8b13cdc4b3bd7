"""The proxied routes, served straight from the ASGI entry, ahead of Starlette's stack.

Every request to `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
`/v1/responses`, `/tokenize` (POST) and `/v1/models` (GET) is matched here by
method and exact path and served without FastAPI's routing, dependency solving and
exception middlewares, and without any layer wrapping `send`: each of those costs
CPU per request or per streamed event, which on a small machine is taken from vLLM
(py-spy profile and figures in docs/gateway.md, "Overhead").  The routes stay
registered on the FastAPI app, so the OpenAPI document and every other path
(probes, metrics, 404/405 answers) are unchanged.

What the removed layers did is done here directly: the header limits (431), the
request count by route and status class (499 when the client left before any
response), OpenAI-shaped errors for what the gateway refuses, and a logged 500 for
anything unexpected, never a traceback in a body.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics, status_class
from gateway.middleware import (
    CLIENT_CLOSED_STATUS,
    rejection_reason,
    send_json_error,
)
from gateway.prepare import MODELS, Preparer
from gateway.proxy import ProxyDeps, ProxyResponse

if TYPE_CHECKING:
    from gateway.front import Front

log = logging.getLogger(__name__)


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


class FastRoutes:
    """`match(scope)` says whether a request is one of the proxied routes; `serve` serves it."""

    def __init__(self, json_paths: tuple[str, ...], preparer: Preparer, deps: ProxyDeps) -> None:
        self.routes = route_table(json_paths)
        self.preparer = preparer
        self.deps = deps

    def match(self, scope: Scope) -> str | None:
        return self.routes.get((scope["method"], scope["path"]))

    async def serve(
        self, path: str, scope: Scope, receive: Receive, send: Send, front: Front | None = None
    ) -> None:
        """Serve one request.  Under the front (gateway/front.py) the protocol cancels
        the task when the client leaves; without it a watcher task does."""
        metrics = self.deps.metrics
        count = RequestCount(metrics, path)
        try:
            forward = await self.preparer.prepare(path, scope, receive)
        except ClientDisconnect:  # the client left while sending its body
            count(CLIENT_CLOSED_STATUS)
            return
        except GatewayError as error:
            reason = rejection_reason(error)
            if reason is not None:
                metrics.rejected.labels(reason).inc()
            count(error.status_code)
            await send_json_error(send, error)
            return
        except Exception:
            log.exception("unexpected error preparing %s", path)
            count(500)
            await send_json_error(send, GatewayError("Internal gateway error."))
            return
        try:
            response = ProxyResponse(self.deps, forward, on_status=count)
            if front is None:
                await response(scope, receive, send)
            elif front.arm():
                await response.serve_cancellable(send, front.left, front.write_chunk)
        except Exception:
            log.exception("unexpected error forwarding %s", path)
            if not count.done:  # nothing sent yet: the client still gets a clean 500
                count(500)
                await send_json_error(send, GatewayError("Internal gateway error."))
        finally:
            count(CLIENT_CLOSED_STATUS)  # no response started: the client left first
            forward.done()  # also when the client had left before the response was armed
