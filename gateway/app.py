"""`create_app(settings, transport=…, registry=…)`: the gateway's FastAPI app.

Everything the app uses is built here from the settings and the injected
transport/registry; nothing is built at import time and no state lives at
module level.  `uvicorn gateway.app:create_app --factory` reads the settings
from the environment.
"""

from __future__ import annotations

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

from gateway.admission import Admission, AdmissionLimits
from gateway.control_poll import ControlPoll, MemoryGate
from gateway.divergence import DivergenceTracker
from gateway.errors import ConfigError, GatewayError, MethodNotAllowed, NotFound, error_response
from gateway.layout import VolatileMatcher
from gateway.metrics import GatewayMetrics
from gateway.middleware import HeaderLimits, RequestMetrics, rejection_reason
from gateway.openapi import json_route, plain_route
from gateway.prepare import Incoming, Preparer
from gateway.probes import Probes
from gateway.proxy import ProxyDeps, ProxyResponse
from gateway.replicas import ReplicaSet
from gateway.settings import GatewaySettings, load_settings
from gateway.tenancy import (
    Authenticator,
    KeyTable,
    SaltMaker,
    load_secret,
    parse_cache_groups,
    read_key_entries,
)
from gateway.thermal import ThermalGuard
from gateway.upstream import Upstream, make_client, make_upstream, make_upstream_client

JSON_ROUTES = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/tokenize",
)
Handler = Callable[[Request], Awaitable[Response]]


def _settings_from_env() -> GatewaySettings:
    try:
        return load_settings()
    except ConfigError as exc:
        print(f"gateway: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None


def preparer_of(
    settings: GatewaySettings, metrics: GatewayMetrics, *, embedded: bool = False
) -> Preparer:
    """The request preparation of `settings`; `embedded`: for the gateway inside vLLM
    (no replicas to choose between, no upstream request to build headers for)."""
    keys = KeyTable(read_key_entries(settings))
    if settings.auth == "on" and not len(keys):
        raise ConfigError(
            "GATEWAY_AUTH=on needs GATEWAY_API_KEYS or GATEWAY_API_KEYS_FILE "
            "(or set GATEWAY_AUTH=off to serve without keys)"
        )
    salts = SaltMaker(load_secret(settings), parse_cache_groups(settings.cache_groups))
    return Preparer(
        auth=Authenticator(keys, required=settings.auth == "on"),
        salts=salts,
        matcher=VolatileMatcher(settings.layout_rules),
        divergence=DivergenceTracker(settings.session_memory),
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        layout_enabled=settings.layout == "on",
        affinity_needed=not embedded and len(settings.upstream_url) > 1,
        headers_needed=not embedded,
    )


def admission_of(settings: GatewaySettings) -> Admission:
    return Admission(
        AdmissionLimits(
            max_concurrency=settings.max_concurrency,
            max_concurrency_per_key=settings.max_concurrency_per_key,
            queue_size=settings.queue_size,
            queue_timeout_seconds=settings.queue_timeout_seconds,
            retry_after_seconds=settings.retry_after_seconds,
        )
    )


def control_poll_of(
    settings: GatewaySettings, admission: Admission, metrics: GatewayMetrics
) -> ControlPoll:
    """What the control endpoint's /metrics drives: the thermal guard, the memory gate."""
    guard = ThermalGuard(
        admission,
        metrics,
        max_concurrency=settings.max_concurrency,
        threshold_celsius=settings.thermal_threshold_celsius,
        fraction=settings.thermal_concurrency_fraction,
    )
    return ControlPoll(guard, MemoryGate(admission, metrics))


def _lifespan(
    client: httpx.AsyncClient,
    upstream: Upstream,
    settings: GatewaySettings,
    poll: ControlPoll,
) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            period = settings.health_interval_seconds
            group.start_soon(upstream.replicas.watch_forever, client, period)
            if settings.control_url:
                url = settings.control_url + "/metrics"
                group.start_soon(poll.poll_forever, client, url, settings.thermal_poll_seconds)
            yield
            group.cancel_scope.cancel()
        await upstream.client.aclose()
        await client.aclose()

    return lifespan


def create_app(
    settings: GatewaySettings | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Build the gateway; raises `ConfigError` on unusable settings."""
    if settings is None:
        settings = _settings_from_env()
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
    metrics = GatewayMetrics.create(registry)
    metrics.concurrency_limit.set(settings.max_concurrency)
    preparer = preparer_of(settings, metrics)
    client = make_client(settings, transport)
    replicas = ReplicaSet(
        settings.upstream_url,
        settings.replica_names,
        metrics,
        routing=settings.routing,
        max_in_flight=settings.replica_max_in_flight,
        timeout_misses=settings.health_timeout_misses,
    )
    upstream = make_upstream(settings, make_upstream_client(settings, transport), replicas)
    admission = admission_of(settings)
    deps = ProxyDeps(upstream, admission, metrics, settings.retry_after_seconds)
    app = FastAPI(
        title="sparkserve gateway",
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan(
            client, upstream, settings, control_poll_of(settings, admission, metrics)
        ),
    )
    _add_routes(app, preparer, deps)
    Probes(settings, client, registry, replicas).add_to(app)
    _add_error_handlers(app, metrics)
    app.add_middleware(HeaderLimits, metrics=metrics)
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app


def _add_routes(app: FastAPI, preparer: Preparer, deps: ProxyDeps) -> None:
    for path in JSON_ROUTES:
        app.add_api_route(
            path,
            _json_handler(preparer, deps, path),
            methods=["POST"],
            openapi_extra=json_route(path),
        )

    async def models(request: Request) -> Response:
        incoming = Incoming(request.scope, request.receive)
        principal = preparer.principal(incoming)
        return ProxyResponse(deps, preparer.plain(incoming, "/v1/models", principal))

    app.add_api_route("/v1/models", models, methods=["GET"], openapi_extra=plain_route())


def _json_handler(preparer: Preparer, deps: ProxyDeps, path: str) -> Handler:
    async def handler(request: Request) -> Response:
        incoming = Incoming(request.scope, request.receive)
        principal = preparer.principal(incoming)
        return ProxyResponse(deps, await preparer.json_call(incoming, path, principal))

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
