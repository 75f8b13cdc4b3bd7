"""The upstream HTTP client behind the `UpstreamClient` seam, and its errors.

`AiohttpUpstream` (chosen by measurement — docs/gateway.md, "Overhead") reads
vLLM's responses with aiohttp's C HTTP parser and a plain keep-alive connector.
It translates its transport failures once, into the gateway's errors: connect →
503, timeout → 504, anything else → 502 (`unavailable`, `timed_out`, `broken`:
the same words for any other client, such as the tests' httpx one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import aiohttp

from gateway.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

WRITE_TIMEOUT_SECONDS = 30.0


# The gateway's three upstream failures, worded once for every client.
def unavailable(retry_after_seconds: int) -> UpstreamUnavailable:
    return UpstreamUnavailable(
        "The model server is not reachable; retry later.", retry_after_seconds=retry_after_seconds
    )


def timed_out() -> UpstreamTimeout:
    return UpstreamTimeout("The model server did not answer in time.")


def broken(detail: str) -> UpstreamError:
    return UpstreamError(f"The model server broke the connection ({detail}).")


def broken_by(exc: BaseException) -> UpstreamError:
    return broken(type(exc).__name__)


def translate_aiohttp(exc: BaseException, retry_after_seconds: int) -> UpstreamError:
    # ConnectionTimeoutError is also a TimeoutError: test the connect failures first.
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return unavailable(retry_after_seconds)
    if isinstance(exc, TimeoutError):
        return timed_out()
    return broken_by(exc)


class AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse, retry_after_seconds: int) -> None:
        self._response = response
        self._retry_after = retry_after_seconds
        self.status = response.status
        self.raw_headers: Sequence[tuple[bytes, bytes]] = response.raw_headers
        self.content_type = response.headers.get("content-type", "")

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self.next_chunk()) is not None:
            yield chunk

    async def next_chunk(self) -> bytes | None:
        try:
            return await self._response.content.readany() or None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise translate_aiohttp(exc, self._retry_after) from None

    def ended(self) -> bool:
        return self._response.content.at_eof()

    async def aclose(self) -> None:
        # A response read to its end goes back to the pool; one cut short is closed,
        # so vLLM sees the disconnect and aborts the request.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpUpstream:
    """aiohttp with an unlimited keep-alive connector; the aiohttp session is made on first use
    (it must be created inside the running event loop)."""

    def __init__(
        self,
        *,
        connect_timeout_seconds: float,
        read_timeout_seconds: float,
        retry_after_seconds: int,
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_seconds, sock_read=read_timeout_seconds
        )
        self._retry_after = retry_after_seconds
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # Admission bounds concurrency; the pool must never be the bottleneck.
                connector=aiohttp.TCPConnector(limit=0, use_dns_cache=True),
                timeout=self._timeout,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> AiohttpResponse:
        """Send once more on a fresh connection when the server closed a pooled one
        before answering (a keep-alive race, or a replica that died): no byte of an
        answer came, so vLLM has nothing to abort.  A second close means it is down."""
        for attempt in (1, 2):
            try:
                response = await self._open().request(
                    method, url, data=body, headers=headers, allow_redirects=False
                )
                return AiohttpResponse(response, self._retry_after)
            except aiohttp.ServerDisconnectedError:
                if attempt == 2:
                    raise unavailable(self._retry_after) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise translate_aiohttp(exc, self._retry_after) from None
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            await asyncio.sleep(0)  # let the connector close its sockets
