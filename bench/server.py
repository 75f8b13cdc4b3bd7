"""What the server says about itself: /version, /v1/models, /metrics, /tokenize."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from bench.client import Target
from bench.counters import Snapshot, parse_metrics
from bench.errors import BenchError

SETTLE_POLL_S = 0.5
SETTLE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServerInfo:
    version: str | None
    max_model_len: int | None
    model_ids: tuple[str, ...]


async def _get_json(http: httpx.AsyncClient, target: Target, path: str) -> Any:
    try:
        response = await http.get(f"{target.url}{path}", headers=target.headers())
    except httpx.HTTPError:
        return None
    if response.status_code != httpx.codes.OK:
        return None
    try:
        return response.json()
    except ValueError:
        return None


async def server_info(
    http: httpx.AsyncClient, target: Target, model: str | None
) -> tuple[ServerInfo, str]:
    """What the server says, and the model to use (`model`, else the first it serves)."""
    version = await _get_json(http, target, "/version")
    models = await _get_json(http, target, "/v1/models")
    cards = models.get("data", []) if isinstance(models, dict) else []
    ids = tuple(str(card.get("id")) for card in cards)
    if model is None:
        if not ids:
            raise BenchError(f"{target.url}/v1/models lists no model; is the server up? (--model)")
        model = ids[0]
    lengths = [card.get("max_model_len") for card in cards if card.get("id") == model]
    info = ServerInfo(
        version=version.get("version") if isinstance(version, dict) else None,
        max_model_len=int(lengths[0]) if lengths and lengths[0] else None,
        model_ids=ids,
    )
    return info, model


async def scrape(http: httpx.AsyncClient, metrics_url: str | None) -> Snapshot | None:
    """One scrape of vLLM's /metrics, or None when there is none to read."""
    if metrics_url is None:
        return None
    try:
        response = await http.get(metrics_url)
    except httpx.HTTPError:
        return None
    if response.status_code != httpx.codes.OK:
        return None
    snapshot = parse_metrics(response.text)
    return snapshot if snapshot.has_vllm() else None


async def settled_scrape(http: httpx.AsyncClient, metrics_url: str | None) -> Snapshot | None:
    """Scrape until two scrapes agree: vLLM updates its counters after a step finishes."""
    previous = await scrape(http, metrics_url)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_TIMEOUT_S
    while previous is not None and loop.time() < deadline:
        await asyncio.sleep(SETTLE_POLL_S)
        current = await scrape(http, metrics_url)
        if current is None or current.values == previous.values:
            return current or previous
        previous = current
    return previous


async def count_tokens(
    http: httpx.AsyncClient,
    target: Target,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
) -> int | None:
    """Prompt tokens of a chat request via vLLM's /tokenize, or None when unavailable."""
    body: dict[str, Any] = {"model": model, "messages": list(messages)}
    if tools:
        body["tools"] = list(tools)
    try:
        response = await http.post(f"{target.url}/tokenize", json=body, headers=target.headers())
    except httpx.HTTPError:
        return None
    if response.status_code != httpx.codes.OK:
        return None
    count = response.json().get("count")
    return int(count) if count is not None else None
