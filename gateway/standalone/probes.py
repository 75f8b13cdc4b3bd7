"""`/healthz` (the process answers), `/readyz` (a replica or the entrypoint is ready), `/metrics`.

Without `GATEWAY_CONTROL_URL`, `/readyz` checks every replica's `/health` now
(updating their health as the background check does) and is ready when at
least one answers 200.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.responses import JSONResponse, Response

from gateway.standalone.replicas import ReplicaSet
from gateway.standalone.settings import GatewaySettings

PROBE_TIMEOUT_SECONDS = 5.0


class Probes:
    def __init__(
        self,
        settings: GatewaySettings,
        client: httpx.AsyncClient,
        registry: CollectorRegistry,
        replicas: ReplicaSet,
    ) -> None:
        self._client = client
        self._registry = registry
        self._replicas = replicas
        self.control_ready_url = settings.control_url + "/ready" if settings.control_url else None

    async def healthz(self) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self) -> Response:
        if self.control_ready_url is None:
            return await self._replicas_ready()
        try:
            answer = await self._client.get(self.control_ready_url, timeout=PROBE_TIMEOUT_SECONDS)
        except httpx.HTTPError as exc:
            return JSONResponse({"status": "unavailable", "reason": type(exc).__name__}, 503)
        if answer.status_code != 200:
            return JSONResponse({"status": "not ready", "upstream_status": answer.status_code}, 503)
        return JSONResponse({"status": "ready"})

    async def _replicas_ready(self) -> Response:
        states = await self._replicas.check_all(self._client, PROBE_TIMEOUT_SECONDS)
        replicas = {name: "healthy" if ok else "unhealthy" for name, ok in states.items()}
        if any(states.values()):
            return JSONResponse({"status": "ready", "replicas": replicas})
        return JSONResponse({"status": "unavailable", "replicas": replicas}, 503)

    async def metrics(self) -> Response:
        return Response(generate_latest(self._registry), media_type=CONTENT_TYPE_LATEST)

    def add_to(self, app: FastAPI) -> None:
        app.add_api_route("/healthz", self.healthz, methods=["GET"])
        app.add_api_route("/readyz", self.readyz, methods=["GET"])
        app.add_api_route("/metrics", self.metrics, methods=["GET"])
