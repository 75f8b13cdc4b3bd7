"""The client side of every case: streamed and plain requests that record what came back."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from reliability.events import StreamTally
from reliability.stack import SERVED_MODEL

# Token ids of the tiny model's BPE vocabulary past its special tokens (devtools/tiny_model.py).
FIRST_PLAIN_TOKEN = 3
LAST_PLAIN_TOKEN = 900
STREAM_TIMEOUT_SECONDS = 120.0


def prompt_ids(rng: random.Random, length: int) -> list[int]:
    return [rng.randint(FIRST_PLAIN_TOKEN, LAST_PLAIN_TOKEN) for _ in range(length)]


def completion_body(
    prompt: list[int], max_tokens: int, *, model: str = SERVED_MODEL
) -> dict[str, Any]:
    """A streamed completion of exactly `max_tokens` tokens, token ids on every chunk."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }


def plain_completion_body(prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """The same completion, answered as one JSON body."""
    body = {**completion_body(prompt, max_tokens), "stream": False}
    del body["stream_options"]
    return body


def chat_body(text: str, max_tokens: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "model": SERVED_MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        **extra,
    }


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class StreamOutcome:
    """What one streamed request saw."""

    started: float
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    tally: StreamTally = field(default_factory=StreamTally)
    transport_error: str | None = None
    hung: bool = False
    ended: float = 0.0
    head_at: float | None = None  # when the response's status and headers arrived

    @property
    def ttft(self) -> float | None:
        times = self.tally.token_times
        return times[0] - self.started if times else None

    @property
    def gaps(self) -> list[float]:
        times = self.tally.token_times
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def complete(self) -> bool:
        """200, [DONE] once at the end, no malformed event, no transport error."""
        tally = self.tally
        return (
            self.status == 200
            and tally.done
            and not tally.after_done
            and not tally.malformed
            and not tally.truncated_event
            and tally.error is None
            and self.transport_error is None
        )

    def failure(self) -> str | None:
        """Why the stream is not `complete`, in a few words (None when it is)."""
        tally = self.tally
        if self.hung:
            return "no end within the client's timeout"
        if self.transport_error is not None:
            return f"transport error {self.transport_error}"
        if self.status != 200:
            excerpt = self.body[:160].decode("utf-8", errors="replace")
            return f"status {self.status}: {excerpt}"
        if tally.error is not None:
            return f"error event: {str(tally.error)[:160]}"
        if tally.malformed:
            return f"{tally.malformed} malformed events"
        if tally.truncated_event:
            return "ended inside an event"
        if not tally.done:
            return f"ended without [DONE] after {tally.tokens} tokens"
        if tally.after_done:
            return f"{tally.after_done} events after [DONE]"
        return None

    @property
    def exact(self) -> bool:
        """Every token vLLM counted arrived once (usage.completion_tokens = tokens received)."""
        usage = self.tally.usage or {}
        return self.complete and usage.get("completion_tokens") == self.tally.tokens


@dataclass(frozen=True)
class StreamPlan:
    """How the client reads: stop after some tokens, read slowly, signal the first token."""

    stop_after_tokens: int | None = None
    first_token: asyncio.Event | None = None
    timeout_s: float = STREAM_TIMEOUT_SECONDS


async def stream(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    plan: StreamPlan = StreamPlan(),
) -> StreamOutcome:
    outcome = StreamOutcome(started=time.monotonic())
    try:
        async with asyncio.timeout(plan.timeout_s):
            await _read_stream(client, url, body, headers, plan, outcome)
    except TimeoutError:
        outcome.hung = True
    except httpx.HTTPError as exc:
        outcome.transport_error = type(exc).__name__
    outcome.ended = time.monotonic()
    if plan.first_token is not None:
        plan.first_token.set()  # never leave a waiter behind
    return outcome


async def _read_stream(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    plan: StreamPlan,
    outcome: StreamOutcome,
) -> None:
    async with client.stream("POST", url, json=body, headers=headers) as response:
        outcome.head_at = time.monotonic()
        outcome.status = response.status_code
        outcome.headers = dict(response.headers)
        if response.status_code != 200:
            outcome.body = await response.aread()
            return
        async for chunk in response.aiter_raw():
            outcome.tally.feed(chunk, time.monotonic())
            if outcome.tally.tokens and plan.first_token is not None:
                plan.first_token.set()
            if (
                plan.stop_after_tokens is not None
                and outcome.tally.tokens >= plan.stop_after_tokens
            ):
                return  # leaving the block closes the connection: a client disconnect


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


async def send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    content: Any = None,
    json_body: Any = None,
    timeout_s: float = 60.0,
) -> Reply:
    started = time.monotonic()
    response = await client.request(
        method, url, headers=headers, content=content, json=json_body, timeout=timeout_s
    )
    return Reply(
        response.status_code, dict(response.headers), response.content, time.monotonic() - started
    )


async def metrics_text(client: httpx.AsyncClient, base_url: str) -> str:
    response = await client.get(f"{base_url}/metrics", timeout=10)
    response.raise_for_status()
    return response.text
