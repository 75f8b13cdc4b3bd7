"""The vLLM replicas behind the gateway: health, in-flight counts, per-replica metrics.

`ReplicaSet.candidates(key)` asks the pure router (`gateway.core.routing`) for the
order in which to try the replicas.  A replica is marked unhealthy when a
connection to it fails (the request then goes to the next candidate, since
nothing reached vLLM), when its `/health` refuses the connection or answers
anything but 200, or when `/health` has timed out `timeout_misses` checks in a
row.  A single slow answer is not proof of anything: on a machine where vLLM
and the gateway share a few cores, `/health` can miss a 0.5 s timeout while
vLLM serves normally, and marking it unhealthy would move its affinity
chat sessions (and their prefix cache) to another replica for nothing.  The
background check (`watch_forever`) and `/readyz` mark it healthy again, and
the router uses it again from then on.  Metric labels are replica names (an
index unless `GATEWAY_UPSTREAM_NAMES` names them), never URLs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

import httpx

from gateway.core.metrics import GatewayMetrics
from gateway.core.routing import ReplicaState, Routing, candidates

log = logging.getLogger("gateway.replicas")
HEALTH_TIMEOUT_SECONDS = 5.0


class SharedCounts(Protocol):
    """In-flight counts and the replica order kept by the parent process for every
    worker (gateway/standalone/workers.py `SharedReplicaCounts`)."""

    async def order(self, key: bytes | None, healthy: list[bool]) -> list[int]: ...

    def started(self, replica: int) -> None: ...

    def finished(self, replica: int) -> None: ...


class Replica:
    def __init__(self, name: str, base_url: str) -> None:
        self.name = name
        self.base_url = base_url
        self.healthy = True  # until a check or a connection says otherwise
        self.in_flight = 0
        self.timeouts = 0  # /health checks in a row that timed out


class ReplicaSet:
    def __init__(
        self,
        urls: Sequence[str],
        names: Sequence[str],
        metrics: GatewayMetrics,
        *,
        routing: Routing,
        max_in_flight: int,
        timeout_misses: int = 2,
        shared: SharedCounts | None = None,
    ) -> None:
        if timeout_misses < 1:
            raise ValueError(f"timeout_misses must be at least 1, got {timeout_misses}")
        self.replicas = [Replica(name, url) for name, url in zip(names, urls, strict=True)]
        self._metrics = metrics
        self._routing: Routing = routing
        self._max_in_flight = max_in_flight
        self._timeout_misses = timeout_misses
        self._turn = 0
        # One replica leaves nothing to share: no order to ask, no counts to send.
        self._shared = shared if len(self.replicas) > 1 else None
        for replica in self.replicas:
            metrics.upstream_healthy.labels(replica.name).set(1)
            metrics.upstream_in_flight.labels(replica.name).set(0)

    def candidates(self, key: bytes | None) -> list[Replica]:
        if len(self.replicas) == 1:  # the common case: no choice to make
            return self.replicas
        states = [ReplicaState(r.name, r.healthy, r.in_flight) for r in self.replicas]
        order = candidates(
            states, key, routing=self._routing, max_in_flight=self._max_in_flight, turn=self._turn
        )
        self._turn += 1
        return [self.replicas[i] for i in order]

    async def order(self, key: bytes | None) -> list[Replica]:
        """`candidates`, or with workers the order the parent gives from every worker's
        in-flight counts."""
        if self._shared is None:
            return self.candidates(key)
        order = await self._shared.order(key, [r.healthy for r in self.replicas])
        return [self.replicas[i] for i in order]

    def started(self, replica: Replica) -> None:
        replica.in_flight += 1
        self._metrics.upstream_in_flight.labels(replica.name).inc()
        if self._shared is not None:
            self._shared.started(self.replicas.index(replica))

    def finished(self, replica: Replica, outcome: str) -> None:
        replica.in_flight -= 1
        if self._shared is not None:
            self._shared.finished(self.replicas.index(replica))
        self._metrics.upstream_in_flight.labels(replica.name).dec()
        self._metrics.upstream_requests.labels(replica.name, outcome).inc()

    def mark(self, replica: Replica, healthy: bool, why: str = "") -> None:
        replica.timeouts = 0
        if healthy != replica.healthy:
            state = "back" if healthy else "unhealthy"
            log.warning("replica %s is %s%s", replica.name, state, f": {why}" if why else "")
        replica.healthy = healthy
        self._metrics.upstream_healthy.labels(replica.name).set(1 if healthy else 0)

    async def check(self, client: httpx.AsyncClient, replica: Replica, timeout_s: float) -> bool:
        """One `/health` check; returns whether the replica counts as healthy now."""
        try:
            answer = await client.get(replica.base_url + "/health", timeout=timeout_s)
        except httpx.TimeoutException:
            replica.timeouts += 1
            if replica.timeouts < self._timeout_misses:
                log.info(
                    "replica %s: /health timed out after %.1f s (%d of %d in a row)",
                    replica.name,
                    timeout_s,
                    replica.timeouts,
                    self._timeout_misses,
                )
                return replica.healthy
            self.mark(replica, False, f"/health timed out {replica.timeouts} times in a row")
            return False
        except httpx.HTTPError as exc:
            self.mark(replica, False, f"/health failed ({type(exc).__name__})")
            return False
        status = answer.status_code
        self.mark(replica, status == 200, f"/health answered {status}")
        return replica.healthy

    async def check_all(
        self, client: httpx.AsyncClient, timeout_s: float = HEALTH_TIMEOUT_SECONDS
    ) -> dict[str, bool]:
        results = await asyncio.gather(*(self.check(client, r, timeout_s) for r in self.replicas))
        return {r.name: ok for r, ok in zip(self.replicas, results, strict=True)}

    async def watch_forever(self, client: httpx.AsyncClient, period_s: float) -> None:
        timeout_s = min(HEALTH_TIMEOUT_SECONDS, max(period_s, 0.5))
        while True:
            await self.check_all(client, timeout_s)
            await asyncio.sleep(period_s)
