"""`/healthz` (the process answers), `/readyz` (vLLM or the entrypoint is ready), `/metrics`."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.responses import JSONResponse, Response

from gateway.settings import GatewaySettings

PROBE_TIMEOUT_SECONDS = 5.0


class Probes:
    def __init__(
        self, settings: GatewaySettings, client: httpx.AsyncClient, registry: CollectorRegistry
    ) -> None:
        self._client = client
        self._registry = registry
        if settings.control_url:
            self.ready_url = settings.control_url + "/ready"
        else:
            self.ready_url = settings.upstream + "/health"

    async def healthz(self) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self) -> Response:
        try:
            answer = await self._client.get(self.ready_url, timeout=PROBE_TIMEOUT_SECONDS)
        except httpx.HTTPError as exc:
            return JSONResponse({"status": "unavailable", "reason": type(exc).__name__}, 503)
        if answer.status_code != 200:
            return JSONResponse({"status": "not ready", "upstream_status": answer.status_code}, 503)
        return JSONResponse({"status": "ready"})

    async def metrics(self) -> Response:
        return Response(generate_latest(self._registry), media_type=CONTENT_TYPE_LATEST)

    def add_to(self, app: FastAPI) -> None:
        app.add_api_route("/healthz", self.healthz, methods=["GET"])
        app.add_api_route("/readyz", self.readyz, methods=["GET"])
        app.add_api_route("/metrics", self.metrics, methods=["GET"])
