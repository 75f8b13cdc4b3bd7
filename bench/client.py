"""Streaming chat completions over httpx, timed chunk by chunk; server info probes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.errors import BenchError
from bench.records import RequestRecord

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0
KEEPALIVE_S = 1.0
SSE_DATA = "data:"
OnOutput = Callable[[int], None]


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible endpoint; `url` is the base URL without /v1."""

    name: str
    url: str
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class ChatRequest:
    """One request of a workload; `group`/`index` name it in the records."""

    workload: str
    group: str
    index: int
    messages: Sequence[Mapping[str, Any]]
    max_tokens: int
    tools: Sequence[Mapping[str, Any]] = field(default_factory=tuple)

    def body(self, model: str, cache_salt: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": list(self.messages),
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "stream": True,
            # Usage on every chunk: tokens per chunk, even those without text.
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            # vLLM extensions: fixed output length, a run-private prefix cache.
            "ignore_eos": True,
            "min_tokens": self.max_tokens,
        }
        if self.tools:
            # The schemas are part of the prompt; no tool parser is needed on the server.
            body["tools"] = list(self.tools)
            body["tool_choice"] = "none"
        if cache_salt:
            body["cache_salt"] = cache_salt
        return body


@dataclass
class _Stream:
    chunk_times: list[float] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    generated: int = 0


class Clock:
    """Seconds since the run started (monotonic)."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0


def _has_text(event: Mapping[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def _carries_tokens(event: Mapping[str, Any], stream: _Stream) -> bool:
    """True when `event` delivered output tokens.

    With `continuous_usage_stats` (vLLM) every chunk says how many tokens were
    generated so far: a chunk carries output iff that number grew, which counts
    tokens that decode to no text and excludes the role-only first chunk.  Other
    servers: a chunk carries output iff it has text.
    """
    if not event.get("choices"):
        return False
    usage = event.get("usage") or {}
    generated = usage.get("completion_tokens")
    if generated is None:
        return _has_text(event)
    grew = int(generated) > stream.generated
    stream.generated = max(stream.generated, int(generated))
    return grew


def _consume(line: str, stream: _Stream, now: float) -> bool:
    """Record one SSE line; True when it carried output tokens."""
    if not line.startswith(SSE_DATA):
        return False
    payload = line[len(SSE_DATA) :].strip()
    if not payload or payload == "[DONE]":
        return False
    event = json.loads(payload)
    output = _carries_tokens(event, stream)
    if event.get("usage"):
        stream.usage = event["usage"]
    if output:
        stream.chunk_times.append(now)
    return output


def _cached(usage: Mapping[str, Any]) -> int | None:
    details = usage.get("prompt_tokens_details") or {}
    value = details.get("cached_tokens")
    return None if value is None else int(value)


class ChatClient:
    """Sends ChatRequests to one Target and returns RequestRecords (never raises for HTTP)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        target: Target,
        model: str,
        clock: Clock,
        cache_salt: str | None = None,
    ) -> None:
        self._http = http
        self.target = target
        self._model = model
        self._clock = clock
        self._salt = cache_salt

    async def send(self, request: ChatRequest, on_output: OnOutput | None = None) -> RequestRecord:
        """Stream `request`; `on_output(n)` is called after the n-th output chunk."""
        stream = _Stream()
        start = self._clock.now()
        error = None
        try:
            await self._stream(request, stream, on_output)
        except (httpx.HTTPError, json.JSONDecodeError, BenchError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        usage = stream.usage
        return RequestRecord(
            workload=request.workload,
            target=self.target.name,
            group=request.group,
            index=request.index,
            start_s=start,
            end_s=self._clock.now(),
            chunk_times_s=tuple(stream.chunk_times),
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cached_tokens=_cached(usage),
            error=error,
        )

    async def _stream(
        self, request: ChatRequest, stream: _Stream, on_output: OnOutput | None
    ) -> None:
        url = f"{self.target.url}/v1/chat/completions"
        body = request.body(self._model, self._salt)
        headers = self.target.headers()
        async with self._http.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != httpx.codes.OK:
                text = (await response.aread()).decode(errors="replace")
                raise BenchError(f"HTTP {response.status_code} from {url}: {text[:300]}")
            async for line in response.aiter_lines():
                if _consume(line, stream, self._clock.now()) and on_output is not None:
                    on_output(len(stream.chunk_times))
        if not stream.usage:
            raise BenchError(f"{url} sent no usage chunk (stream_options.include_usage)")


def http_client() -> httpx.AsyncClient:
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    # Idle connections expire before the server's keep-alive (uvicorn: 5 s) closes them,
    # so a request never races a server-side close (a ReadError with no bytes read).
    limits = httpx.Limits(
        max_connections=None, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_S
    )
    return httpx.AsyncClient(timeout=timeout, limits=limits)
