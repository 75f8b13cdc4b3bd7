"""The proxied JSON routes (`POST /v1/chat/completions` and the others in
`JSON_ROUTES`) served as plain ASGI, ahead of FastAPI.

FastAPI's router, its request objects and exception middleware, and the app's two
`send`-wrapping middlewares cost more per request than all of the gateway's own
decisions (docs/gateway.md, "CPU per request").  `HotRoutes` sits outermost among the
app's middleware and answers these routes itself, doing what that path did: the
header limits (431), a refusal as the same OpenAI-shaped error with its
`gateway_rejected_total` reason, `gateway_requests_total` by route and status class
(499 when the client left before an answer, 500 when something unexpected is raised,
which Starlette's outer `ServerErrorMiddleware` then answers and logs as before).
Every other request, and any request under a `root_path`, goes on to FastAPI, where
the routes stay declared for `/openapi.json`.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import CLIENT_CLOSED_STATUS, SERVER_ERROR_STATUS, GatewayError
from gateway.core.headers import headers_error
from gateway.core.metrics import GatewayMetrics
from gateway.core.prepare import Incoming, Preparer
from gateway.core.routes import JSON_ROUTES, RequestCount, refuse
from gateway.standalone.models import ModelRoutes
from gateway.standalone.proxy import ProxyResponse


class HotRoutes:
    def __init__(
        self, app: ASGIApp, preparer: Preparer, routes: ModelRoutes, metrics: GatewayMetrics
    ) -> None:
        self.app = app
        self.preparer = preparer
        self.routes = routes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in JSON_ROUTES
            and not scope.get("root_path")
        ):
            await self._serve(scope["path"], scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _serve(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        count = RequestCount(self.metrics, path)
        try:
            error: GatewayError | None = headers_error(scope)
            if error is None:
                try:
                    incoming = Incoming(scope, receive)
                    principal = self.preparer.principal(incoming)
                    forward = await self.preparer.json_call(incoming, path, principal)
                    deps = self.routes.deps_for(forward)
                except ClientDisconnect:  # the client left while sending its body
                    return
                except GatewayError as refused:
                    error = refused
            if error is not None:
                await refuse(send, count, error)
                return
            await ProxyResponse(deps, forward, on_status=count)(scope, receive, send)
        except Exception:
            count(SERVER_ERROR_STATUS)
            raise
        finally:
            count(CLIENT_CLOSED_STATUS)  # no answer went out: a count was taken otherwise
