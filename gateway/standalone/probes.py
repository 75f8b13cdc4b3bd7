"""`/healthz` (the process answers), `/readyz` (a replica or the entrypoint is ready), `/metrics`.

Without `GATEWAY_CONTROL_URL`, `/readyz` checks every replica's `/health` now
(updating their health as the background check does) and is ready when at
least one answers 200.  With several models (GATEWAY_MODELS) each model is checked
so, by its own control endpoint (GATEWAY_MODEL_CONTROL_URLS, else
GATEWAY_CONTROL_URL) or else its replicas, and the gateway is ready when every model
is; the body says each model's state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.responses import JSONResponse, Response

from gateway.standalone.models import ModelDeps, ModelRoutes
from gateway.standalone.settings import GatewaySettings

PROBE_TIMEOUT_SECONDS = 5.0


class Probes:
    def __init__(
        self,
        settings: GatewaySettings,
        client: httpx.AsyncClient,
        registry: CollectorRegistry,
        models: ModelRoutes,
        gathered: Callable[[], Awaitable[bytes]] | None = None,
    ) -> None:
        """`gathered`: the whole gateway's metrics, when this app is one of its workers."""
        self._client = client
        self._registry = registry
        self._models = models
        self._gathered = gathered

    async def healthz(self) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self) -> Response:
        if not self._models.several:
            body, ready = await self._ready(self._models.models[0])
            return JSONResponse(body, 200 if ready else 503)
        states = await asyncio.gather(*(self._ready(m) for m in self._models.models))
        ready = all(ok for _, ok in states)
        models = {
            str(m.name): body for m, (body, _) in zip(self._models.models, states, strict=True)
        }
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "models": models}, 200 if ready else 503
        )

    async def _ready(self, model: ModelDeps) -> tuple[dict[str, Any], bool]:
        if model.control_url is None:
            return await self._replicas_ready(model)
        try:
            answer = await self._client.get(
                model.control_url + "/ready", timeout=PROBE_TIMEOUT_SECONDS
            )
        except httpx.HTTPError as exc:
            return {"status": "unavailable", "reason": type(exc).__name__}, False
        if answer.status_code != 200:
            return {"status": "not ready", "upstream_status": answer.status_code}, False
        return {"status": "ready"}, True

    async def _replicas_ready(self, model: ModelDeps) -> tuple[dict[str, Any], bool]:
        replica_set = model.deps.upstream.replicas
        states = await replica_set.check_all(self._client, PROBE_TIMEOUT_SECONDS)
        replicas = {name: "healthy" if ok else "unhealthy" for name, ok in states.items()}
        if any(states.values()):
            return {"status": "ready", "replicas": replicas}, True
        return {"status": "unavailable", "replicas": replicas}, False

    async def metrics(self) -> Response:
        if self._gathered is not None:
            return Response(await self._gathered(), media_type=CONTENT_TYPE_LATEST)
        return Response(generate_latest(self._registry), media_type=CONTENT_TYPE_LATEST)

    def add_to(self, app: FastAPI) -> None:
        app.add_api_route("/healthz", self.healthz, methods=["GET"])
        app.add_api_route("/readyz", self.readyz, methods=["GET"])
        app.add_api_route("/metrics", self.metrics, methods=["GET"])
