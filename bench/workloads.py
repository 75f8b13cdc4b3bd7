"""What every workload is given, and the helpers they share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from bench.client import ChatClient, ChatRequest
from bench.errors import BenchError
from bench.records import RequestRecord
from bench.scale import Scale
from bench.server import count_tokens

Messages = list[dict[str, Any]]
# Room left for the chat template's own tokens and the output when sizing a prompt.
TEMPLATE_MARGIN_TOKENS = 32
FIT_ROUNDS = 5
FIT_AIM = 0.99  # aim a little under the target: the template adds a few tokens
FALLBACK_TOKENS_PER_WORD = 1.5


@dataclass(frozen=True)
class Context:
    """A run's shared state; `sink` records (and counts) each finished request."""

    http: httpx.AsyncClient
    clients: tuple[ChatClient, ...]
    model: str
    scale: Scale
    seed: int
    max_model_len: int
    sink: Callable[[RequestRecord], None]

    @property
    def primary(self) -> ChatClient:
        return self.clients[0]

    async def send(self, client: ChatClient, request: ChatRequest) -> RequestRecord:
        record = await client.send(request)
        self.sink(record)
        return record

    async def tokens(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int | None:
        return await count_tokens(self.http, self.primary.target, self.model, messages, tools)


async def gather_limited(
    limit: int, jobs: Iterable[Awaitable[RequestRecord]]
) -> list[RequestRecord]:
    """Run `jobs` with at most `limit` in flight; results in submission order."""
    semaphore = asyncio.Semaphore(limit)

    async def guarded(job: Awaitable[RequestRecord]) -> RequestRecord:
        async with semaphore:
            return await job

    return list(await asyncio.gather(*(guarded(job) for job in jobs)))


async def fit_prompt(
    ctx: Context, build: Callable[[int], Messages], target_tokens: int
) -> tuple[Messages, int]:
    """The messages of `build(words)` whose prompt is as close to `target_tokens` as
    /tokenize lets us get without going over (an estimate when /tokenize is missing)."""
    if target_tokens < 1:
        raise BenchError(f"prompt target of {target_tokens} tokens; max_model_len too small")
    n_words = max(1, int(target_tokens / FALLBACK_TOKENS_PER_WORD))
    best: tuple[Messages, int] | None = None
    for _ in range(FIT_ROUNDS):
        messages = build(n_words)
        count = await ctx.tokens(messages)
        if count is None:
            return messages, int(n_words * FALLBACK_TOKENS_PER_WORD)
        if count <= target_tokens:
            if best is None or count > best[1]:
                best = (messages, count)
            if target_tokens - count <= max(8, target_tokens // 100):
                break
        n_words = max(1, int(n_words * target_tokens * FIT_AIM / count))
    if best is None:
        raise BenchError(f"could not build a prompt under {target_tokens} tokens")
    return best
