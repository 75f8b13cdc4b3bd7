"""The seam to vLLM: the `UpstreamClient` protocol and the clients the app makes.

The proxy talks to vLLM only through `UpstreamClient.send`, which returns an
`UpstreamResponse` (status, raw headers, body chunks as they arrive) and raises
only `UpstreamError`s.  The implementation is aiohttp's
(`gateway.standalone.clients`); `create_app` takes any other (the tests' error paths
inject an httpx one).  Probes and the control poll use a separate small httpx client
(`make_client`).  What is forwarded of the headers: `gateway.core.headers`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from gateway.standalone.clients import WRITE_TIMEOUT_SECONDS, AiohttpUpstream
from gateway.standalone.replicas import ReplicaSet
from gateway.standalone.settings import GatewaySettings


class UpstreamResponse(Protocol):
    status: int
    raw_headers: Sequence[tuple[bytes, bytes]]
    content_type: str

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def next_chunk(self) -> bytes | None:
        """The next body bytes as they arrive; None at the end."""
        ...

    def ended(self) -> bool:
        """The whole body has arrived: `next_chunk` would return None (False when
        that is not known yet)."""
        ...

    async def aclose(self) -> None: ...


class UpstreamClient(Protocol):
    async def send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Upstream:
    """Where and how to reach vLLM: the client, the replicas, headers for every request."""

    client: UpstreamClient
    replicas: ReplicaSet
    headers: dict[str, str] = field(default_factory=dict)


def make_client(
    settings: GatewaySettings, transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncClient:
    """The control-plane client: `/readyz`, health checks, the thermal poll."""
    timeout = httpx.Timeout(
        connect=settings.connect_timeout_seconds,
        read=settings.read_timeout_seconds,
        write=WRITE_TIMEOUT_SECONDS,
        pool=settings.queue_timeout_seconds,
    )
    return httpx.AsyncClient(transport=transport, timeout=timeout)


def make_upstream_client(settings: GatewaySettings) -> UpstreamClient:
    """The data-plane client to vLLM: aiohttp."""
    return AiohttpUpstream(
        connect_timeout_seconds=settings.connect_timeout_seconds,
        read_timeout_seconds=settings.read_timeout_seconds,
        retry_after_seconds=settings.retry_after_seconds,
    )


def make_upstream(
    settings: GatewaySettings, client: UpstreamClient, replicas: ReplicaSet
) -> Upstream:
    headers = {"accept-encoding": "identity"}
    if settings.upstream_api_key is not None:
        headers["authorization"] = "Bearer " + settings.upstream_api_key.get_secret_value()
    return Upstream(client=client, replicas=replicas, headers=headers)
