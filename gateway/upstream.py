"""The HTTP client to vLLM, header filtering, and httpx errors → `GatewayError`s."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
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
# Never passed to vLLM: the client's credentials and the gateway's own controls.
REQUEST_DROPPED = HOP_BY_HOP | {"authorization", "cookie", "accept-encoding", "x-session-id"}
# Set again by uvicorn, or no longer true once the gateway rewrote the stream.
RESPONSE_DROPPED = HOP_BY_HOP | {"date", "server"}
WRITE_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Upstream:
    """Where and how to reach vLLM."""

    client: httpx.AsyncClient
    base_url: str
    headers: dict[str, str] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.base_url + path


def make_client(
    settings: GatewaySettings, transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncClient:
    timeout = httpx.Timeout(
        connect=settings.connect_timeout_seconds,
        read=settings.read_timeout_seconds,
        write=WRITE_TIMEOUT_SECONDS,
        pool=settings.queue_timeout_seconds,
    )
    # Admission bounds concurrency; the pool must never be the bottleneck.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=settings.max_concurrency)
    if transport is None:
        transport = httpx.AsyncHTTPTransport(limits=limits)
    return httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits)


def make_upstream(settings: GatewaySettings, client: httpx.AsyncClient) -> Upstream:
    headers = {"accept-encoding": "identity"}
    if settings.upstream_api_key is not None:
        headers["authorization"] = "Bearer " + settings.upstream_api_key.get_secret_value()
    return Upstream(client=client, base_url=settings.upstream, headers=headers)


def forward_headers(
    raw: Iterable[tuple[bytes, bytes]], extra: dict[str, str]
) -> list[tuple[str, str]]:
    kept = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in raw
        if name.lower().decode("latin-1") not in REQUEST_DROPPED
        and not name.lower().startswith(b"x-sparkserve-")
    ]
    return kept + list(extra.items())


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [
        (name, value)
        for name, value in raw
        if name.lower().decode("latin-1") not in RESPONSE_DROPPED
    ]


def translate(exc: httpx.HTTPError, retry_after_seconds: int) -> UpstreamError:
    """One mapping of transport failures: connect → 503, timeout → 504, others → 502."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return UpstreamUnavailable(
            "The model server is not reachable; retry later.",
            retry_after_seconds=retry_after_seconds,
        )
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout("The model server did not answer in time.")
    return UpstreamError(f"The model server broke the connection ({type(exc).__name__}).")
