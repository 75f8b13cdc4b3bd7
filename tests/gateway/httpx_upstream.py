"""`HttpxUpstream`: the `UpstreamClient` over an httpx transport, for the tests' error
paths (`httpx.MockTransport`), and `httpx_app`, the gateway over such a transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from gateway.core.errors import UpstreamError
from gateway.standalone.app import create_app
from gateway.standalone.clients import (
    WRITE_TIMEOUT_SECONDS,
    broken_by,
    timed_out,
    unavailable,
)
from gateway.standalone.settings import GatewaySettings


def translate_httpx(exc: httpx.HTTPError, retry_after_seconds: int) -> UpstreamError:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return unavailable(retry_after_seconds)
    if isinstance(exc, httpx.TimeoutException):
        return timed_out()
    return broken_by(exc)


class HttpxResponse:
    def __init__(self, response: httpx.Response, retry_after_seconds: int) -> None:
        self._response = response
        self._retry_after = retry_after_seconds
        self.status = response.status_code
        self.raw_headers: Sequence[tuple[bytes, bytes]] = response.headers.raw
        self.content_type = response.headers.get("content-type", "")
        self._raw: AsyncIterator[bytes] | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self.next_chunk()) is not None:
            yield chunk

    async def next_chunk(self) -> bytes | None:
        if self._raw is None:
            self._raw = self._response.aiter_raw()
        try:
            return await anext(self._raw)
        except StopAsyncIteration:
            return None
        except httpx.HTTPError as exc:
            raise translate_httpx(exc, self._retry_after) from None

    def ended(self) -> bool:
        return False  # httpx knows the body has ended only at the read after its last

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    """httpx over the given (or a default) transport."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None,
        *,
        connect_timeout_seconds: float,
        read_timeout_seconds: float,
        retry_after_seconds: int,
    ) -> None:
        timeout = httpx.Timeout(
            connect=connect_timeout_seconds,
            read=read_timeout_seconds,
            write=WRITE_TIMEOUT_SECONDS,
            pool=None,
        )
        # Admission bounds concurrency; the pool must never be the bottleneck.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self._client = httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits)
        self._retry_after = retry_after_seconds

    async def send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> HttpxResponse:
        request = self._client.build_request(method, url, content=body, headers=headers)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise translate_httpx(exc, self._retry_after) from None
        return HttpxResponse(response, self._retry_after)

    async def aclose(self) -> None:
        await self._client.aclose()


def httpx_upstream(
    settings: GatewaySettings, transport: httpx.AsyncBaseTransport | None
) -> HttpxUpstream:
    """The httpx client over `transport`, with the timeouts of `settings`."""
    return HttpxUpstream(
        transport,
        connect_timeout_seconds=settings.connect_timeout_seconds,
        read_timeout_seconds=settings.read_timeout_seconds,
        retry_after_seconds=settings.retry_after_seconds,
    )


def httpx_app(
    settings: GatewaySettings,
    transport: httpx.AsyncBaseTransport,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The gateway with `transport` under both its data plane (httpx) and its control
    plane (probes, health checks, the control poll)."""
    return create_app(
        settings,
        transport=transport,
        upstream_client=httpx_upstream(settings, transport),
        registry=registry,
    )
