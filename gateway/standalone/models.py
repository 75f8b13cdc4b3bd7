"""Several models behind one gateway (GATEWAY_MODELS): each model's own replicas,
admission and control endpoint, chosen by the request's `model`; the merged
`/v1/models`.

Each model is a `ModelDeps`: its `ProxyDeps` (replicas with today's affinity routing
and failover, its own `Admission`, so a model's queue never holds up another's) and
the control endpoint behind its readiness, thermal guard and memory gate.  One
unnamed model is GATEWAY_UPSTREAM_URL's: requests go to it whatever their `model`,
as before.  `gateway_concurrency_limit` is then the sum of the models' limits (as
`gateway_in_flight` is the sum of their requests) and `gateway_memory_low` is 1
while any model's entrypoint refuses work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx
from starlette.responses import JSONResponse, Response

from gateway.core.admission import Admission
from gateway.core.control import ControlPoll
from gateway.core.errors import ModelNotFound
from gateway.core.forward import Forward
from gateway.core.metrics import GatewayMetrics, SettableGauge
from gateway.core.models import choose
from gateway.core.tenancy import Principal
from gateway.edge.build import control_poll_of
from gateway.edge.control_poll import Applies
from gateway.standalone.proxy import ProxyDeps
from gateway.standalone.settings import GatewaySettings, ModelUpstream

MODELS_TIMEOUT_SECONDS = 5.0
OWNED_BY = "sparkserve"


@dataclass(frozen=True)
class ModelDeps:
    """One model: its name (None: the one model of GATEWAY_UPSTREAM_URL), what its
    requests share, and its control endpoint (None: none)."""

    name: str | None
    deps: ProxyDeps
    control_url: str | None


class GaugeShare:
    """One gauge over per-model values: it shows `combine` of the latest of each."""

    def __init__(self, gauge: SettableGauge, combine: Callable[[Iterable[float]], float]) -> None:
        self._gauge = gauge
        self._combine = combine
        self._values: dict[str, float] = {}

    def part(self, name: str, value: float) -> SettableGauge:
        share = self

        class Part:
            def set(self, value: float) -> None:
                share._values[name] = value
                share._gauge.set(share._combine(share._values.values()))

        part = Part()
        part.set(value)
        return part


def model_metrics(
    metrics: GatewayMetrics, names: list[str], max_concurrency: int
) -> dict[str, GatewayMetrics]:
    """Each model's view of `metrics`: its limit and memory gate are a share of the
    gateway's gauges (sum of the limits; any model short of memory)."""
    limit, memory = GaugeShare(metrics.concurrency_limit, sum), GaugeShare(metrics.memory_low, max)
    return {
        name: replace(
            metrics,
            concurrency_limit=limit.part(name, max_concurrency),
            memory_low=memory.part(name, 0.0),
        )
        for name in names
    }


class ControlPolls:
    """One control endpoint's reading applied to every model that uses it."""

    def __init__(self, polls: list[ControlPoll]) -> None:
        self.polls = polls

    def apply(self, metrics_text: str) -> None:
        for poll in self.polls:
            poll.apply(metrics_text)


def control_polls(
    settings: GatewaySettings,
    metrics: GatewayMetrics,
    upstreams: Sequence[ModelUpstream],
    admissions: Sequence[Admission],
) -> dict[str, Applies]:
    """Each control endpoint and what its reading drives: the thermal guard and memory
    gate of every model that uses it, each model's limit a share of the gauges."""
    views = (
        model_metrics(metrics, [str(m.name) for m in upstreams], settings.max_concurrency)
        if upstreams[0].name is not None
        else {}
    )
    polls: dict[str, list[ControlPoll]] = {}
    for upstream, admission in zip(upstreams, admissions, strict=True):
        if upstream.control_url:
            view = views.get(str(upstream.name), metrics)
            polls.setdefault(upstream.control_url, []).append(
                control_poll_of(settings, admission, view)
            )
    return {url: ps[0] if len(ps) == 1 else ControlPolls(ps) for url, ps in polls.items()}


class ModelRoutes:
    """The models of the gateway and the choice of one for a request."""

    def __init__(self, models: list[ModelDeps]) -> None:
        self.models = models
        self._named = {m.name: m for m in models if m.name is not None}
        self.several = bool(self._named)

    def deps_for(self, forward: Forward) -> ProxyDeps:
        """The `ProxyDeps` of the request's model; `ModelNotFound` (the request is
        then done) for a model not served here or not for its key."""
        if not self.several:
            return self.models[0].deps
        try:
            name = choose(forward.model, list(self._named), forward.principal.models)
        except ModelNotFound:
            forward.done()
            raise
        return self._named[name].deps

    async def list_models(self, client: httpx.AsyncClient, principal: Principal) -> Response:
        """`GET /v1/models` with several models: every configured model the key may
        use, each as its upstream reports it (its entry whose `id` is the model's
        name), or in OpenAI's shape when its upstream does not answer with it."""
        usable = [
            m
            for m in self._named.values()
            if principal.models is None or m.name in principal.models
        ]
        entries = await asyncio.gather(*(_entry(client, m) for m in usable))
        return JSONResponse({"object": "list", "data": list(entries)})


async def _entry(client: httpx.AsyncClient, model: ModelDeps) -> dict[str, Any]:
    assert model.name is not None
    upstream = model.deps.upstream
    for replica in upstream.replicas.candidates(None):
        try:
            answer = await client.get(
                replica.base_url + "/v1/models",
                headers=upstream.headers,
                timeout=MODELS_TIMEOUT_SECONDS,
            )
            listed = answer.json().get("data") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        for entry in listed if isinstance(listed, list) else []:
            if isinstance(entry, dict) and entry.get("id") == model.name:
                return entry
        break  # the upstream answered, without this model: it is listed as configured
    return {"id": model.name, "object": "model", "created": 0, "owned_by": OWNED_BY}
