"""`create_app(settings, transport=…, upstream_client=…, registry=…)`: the standalone
gateway's FastAPI app.

Everything the app uses is built here from the settings and the injected
client/transport/registry; nothing is built at import time and no state lives at
module level.  `uvicorn gateway.app:create_app --factory` reads the settings
from the environment.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, ProcessCollector
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.admission import Slots
from gateway.core.errors import (
    ConfigError,
    GatewayError,
    MethodNotAllowed,
    NotFound,
    error_response,
    rejection_reason,
)
from gateway.core.metrics import GatewayMetrics
from gateway.core.prepare import Incoming, Preparer
from gateway.core.routes import JSON_ROUTES
from gateway.edge.build import admission_of, preparer_of
from gateway.edge.control_poll import Applies, poll_forever
from gateway.standalone import heap
from gateway.standalone.hot import HotRoutes
from gateway.standalone.middleware import HeaderLimits, RequestMetrics
from gateway.standalone.models import ModelDeps, ModelRoutes, control_polls
from gateway.standalone.openapi import json_route, plain_route
from gateway.standalone.probes import Probes
from gateway.standalone.proxy import ProxyDeps, ProxyResponse
from gateway.standalone.replicas import ReplicaSet
from gateway.standalone.settings import GatewaySettings, load_settings
from gateway.standalone.upstream import (
    UpstreamClient,
    make_client,
    make_upstream,
    make_upstream_client,
)
from gateway.standalone.workers import (
    COORDINATOR_ENV,
    Link,
    SharedAdmission,
    SharedDivergence,
    SharedReplicaCounts,
)

__all__ = ["JSON_ROUTES", "create_app", "settings_from_env", "worker_app"]

Handler = Callable[[Request], Awaitable[Response]]


def settings_from_env() -> GatewaySettings:
    """The settings from the environment; bad ones print one line and exit 2."""
    try:
        return load_settings()
    except ConfigError as exc:
        print(f"gateway: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None


def worker_app() -> FastAPI:
    """One worker's app (`GATEWAY_WORKERS` above 1: uvicorn imports it in each worker
    process that the parent, gateway/standalone/workers.py, starts)."""
    path = os.environ.get(COORDINATOR_ENV)
    if not path:
        print(
            f"gateway worker: {COORDINATOR_ENV} is unset; start python -m gateway", file=sys.stderr
        )
        raise SystemExit(2)
    app = create_app(settings_from_env(), link_path=path)
    heap.settle()
    return app


def _lifespan(
    client: httpx.AsyncClient,
    upstream_client: UpstreamClient,
    settings: GatewaySettings,
    models: ModelRoutes,
    polls: dict[str, Applies],
    link: Link | None,
) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if link is not None:
            await link.connect()
        async with anyio.create_task_group() as group:
            period = settings.health_interval_seconds
            for model in models.models:
                group.start_soon(model.deps.upstream.replicas.watch_forever, client, period)
            for control_url, poll in polls.items():
                url = control_url + "/metrics"
                group.start_soon(poll_forever, poll, client, url, settings.thermal_poll_seconds)
            yield
            group.cancel_scope.cancel()
        if link is not None:
            await link.close()
        await upstream_client.aclose()
        await client.aclose()

    return lifespan


def create_app(
    settings: GatewaySettings | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    upstream_client: UpstreamClient | None = None,
    registry: CollectorRegistry | None = None,
    link_path: str | None = None,
) -> FastAPI:
    """Build the gateway; raises `ConfigError` on unusable settings.

    `upstream_client`: the data plane to vLLM (default aiohttp's, from the settings);
    `transport`: under the control plane's httpx client (probes, health checks, the
    control poll); `link_path`: the parent's socket when this app is one of several
    workers (gateway/standalone/workers.py): admission, replica counts, chat session memory,
    the control poll and the whole /metrics are then the parent's."""
    if settings is None:
        settings = settings_from_env()
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
    metrics = GatewayMetrics.create(registry)
    metrics.concurrency_limit.set(settings.max_concurrency)
    upstreams = settings.model_upstreams()
    link = Link(link_path, registry) if link_path else None
    preparer = preparer_of(
        settings,
        metrics,
        affinity_needed=any(len(m.urls) > 1 for m in upstreams),
        headers_needed=True,
    )
    if link is not None:
        preparer = dataclasses.replace(preparer, divergence=SharedDivergence(link))
    client = make_client(settings, transport)
    if upstream_client is None:
        upstream_client = make_upstream_client(settings)
    # With workers, admission and the control poll are the parent's.
    local = [admission_of(settings) for _ in upstreams] if link is None else []
    models: list[ModelDeps] = []
    for index, model in enumerate(upstreams):
        replicas = ReplicaSet(
            model.urls,
            model.replica_names,
            metrics,
            routing=settings.routing,
            max_in_flight=settings.replica_max_in_flight,
            timeout_misses=settings.health_timeout_misses,
            shared=SharedReplicaCounts(link, index) if link else None,
        )
        upstream = make_upstream(settings, upstream_client, replicas)
        admission: Slots = SharedAdmission(link, index) if link else local[index]
        deps = ProxyDeps(upstream, admission, metrics, settings.retry_after_seconds)
        models.append(ModelDeps(model.name, deps, model.control_url))
    polls = control_polls(settings, metrics, upstreams, local) if link is None else {}
    routes = ModelRoutes(models)
    app = FastAPI(
        title="sparkserve gateway",
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan(client, upstream_client, settings, routes, polls, link),
    )
    _add_routes(app, preparer, routes, client)
    Probes(settings, client, registry, routes, link.metrics_text if link else None).add_to(app)
    _add_error_handlers(app, metrics)
    app.add_middleware(HeaderLimits, metrics=metrics)
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(HotRoutes, preparer=preparer, routes=routes, metrics=metrics)
    return app


def _add_routes(
    app: FastAPI, preparer: Preparer, routes: ModelRoutes, client: httpx.AsyncClient
) -> None:
    for path in JSON_ROUTES:
        app.add_api_route(
            path,
            _json_handler(preparer, routes, path),
            methods=["POST"],
            openapi_extra=json_route(path),
        )

    async def models(request: Request) -> Response:
        incoming = Incoming(request.scope, request.receive)
        principal = preparer.principal(incoming)
        if routes.several:
            return await routes.list_models(client, principal)
        forward = preparer.plain(incoming, "/v1/models", principal)
        return ProxyResponse(routes.models[0].deps, forward)

    app.add_api_route("/v1/models", models, methods=["GET"], openapi_extra=plain_route())


def _json_handler(preparer: Preparer, routes: ModelRoutes, path: str) -> Handler:
    async def handler(request: Request) -> Response:
        incoming = Incoming(request.scope, request.receive)
        principal = preparer.principal(incoming)
        forward = await preparer.json_call(incoming, path, principal)
        return ProxyResponse(routes.deps_for(forward), forward)

    handler.__name__ = "proxy_" + path.strip("/").replace("/", "_")
    return handler


def _add_error_handlers(app: FastAPI, metrics: GatewayMetrics) -> None:
    async def gateway_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        reason = rejection_reason(exc)
        if reason is not None:
            metrics.rejected.labels(reason).inc()
        return error_response(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 405:
            return error_response(MethodNotAllowed(f"Method {request.method} is not allowed here."))
        if status == 404:
            return error_response(NotFound(f"No route {request.url.path}."))
        error = GatewayError(str(getattr(exc, "detail", "")) or "Request failed.")
        error.status_code = status
        return error_response(error)

    async def unexpected(request: Request, exc: Exception) -> Response:
        return error_response(GatewayError("Internal gateway error."))

    app.add_exception_handler(GatewayError, gateway_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
