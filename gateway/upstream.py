"""The seam to vLLM: the `UpstreamClient` protocol, its choice, and header filtering.

The proxy talks to vLLM only through `UpstreamClient.send`, which returns an
`UpstreamResponse` (status, raw headers, body chunks as they arrive) and raises
only `UpstreamError`s.  The implementation is aiohttp's (`gateway.clients`); an
injected httpx transport (the tests' error paths) means httpx over it.  Probes and
the thermal poll use a separate small httpx client (`make_client`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from gateway.clients import WRITE_TIMEOUT_SECONDS, AiohttpUpstream, HttpxUpstream
from gateway.replicas import ReplicaSet
from gateway.settings import GatewaySettings

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the gateway sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# Never passed to vLLM: the client's credentials, the gateway's own controls, and
# `Expect: 100-continue`, which the gateway's server answered and whose body it has read
# (forwarded, vLLM would answer `100 Continue` to a request sent whole).
REQUEST_DROPPED = HOP_BY_HOP | {
    "authorization",
    "cookie",
    "accept-encoding",
    "x-session-id",
    "expect",
}
# Set again by uvicorn, or no longer true once the gateway rewrote the stream.
RESPONSE_DROPPED = HOP_BY_HOP | {"date", "server"}
_REQUEST_DROPPED_BYTES = frozenset(name.encode() for name in REQUEST_DROPPED)
_RESPONSE_DROPPED_BYTES = frozenset(name.encode() for name in RESPONSE_DROPPED)


class UpstreamResponse(Protocol):
    status: int
    raw_headers: Sequence[tuple[bytes, bytes]]
    content_type: str

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def next_chunk(self) -> bytes | None:
        """The next body bytes as they arrive; None at the end."""
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


def make_upstream_client(
    settings: GatewaySettings, transport: httpx.AsyncBaseTransport | None
) -> UpstreamClient:
    """The data-plane client to vLLM: aiohttp; over an injected httpx transport (the
    tests' error paths) the httpx one."""
    connect, read = settings.connect_timeout_seconds, settings.read_timeout_seconds
    retry_after = settings.retry_after_seconds
    if transport is not None:
        return HttpxUpstream(
            transport,
            connect_timeout_seconds=connect,
            read_timeout_seconds=read,
            retry_after_seconds=retry_after,
        )
    return AiohttpUpstream(
        connect_timeout_seconds=connect, read_timeout_seconds=read, retry_after_seconds=retry_after
    )


def make_upstream(
    settings: GatewaySettings, client: UpstreamClient, replicas: ReplicaSet
) -> Upstream:
    headers = {"accept-encoding": "identity"}
    if settings.upstream_api_key is not None:
        headers["authorization"] = "Bearer " + settings.upstream_api_key.get_secret_value()
    return Upstream(client=client, replicas=replicas, headers=headers)


def forward_headers(
    raw: Iterable[tuple[bytes, bytes]], extra: dict[str, str]
) -> list[tuple[str, str]]:
    kept = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in raw
        if name.lower() not in _REQUEST_DROPPED_BYTES
        and not name.lower().startswith(b"x-sparkserve-")
    ]
    return kept + list(extra.items())


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in raw if name.lower() not in _RESPONSE_DROPPED_BYTES]
