"""What every case gets: the stack, the mode, one HTTP client and vLLM's gauges."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass

import httpx

from reliability import promtext
from reliability.client import bearer, metrics_text
from reliability.procs import open_fds, rss_bytes
from reliability.stack import Stack

KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_SETTLED_FRACTION = 0.005  # KV usage within half a percentage point of its baseline
SETTLE_TIMEOUT_SECONDS = 20.0
SETTLE_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class EngineGauges:
    running: float
    waiting: float
    kv_usage: float  # fraction of the KV pool in use, 0..1

    def idle_near(self, kv_baseline: float) -> bool:
        return (
            self.running == 0
            and self.waiting == 0
            and self.kv_usage <= kv_baseline + KV_SETTLED_FRACTION
        )


@dataclass(frozen=True)
class ProcessSample:
    gateway_rss: int
    entrypoint_rss: int
    gateway_fds: int
    entrypoint_fds: int


@dataclass
class Ctx:
    stack: Stack
    short: bool
    client: httpx.AsyncClient
    rng: random.Random

    @property
    def alice(self) -> dict[str, str]:
        return bearer(self.stack.creds.alice_key)

    @property
    def bob(self) -> dict[str, str]:
        return bearer(self.stack.creds.bob_key)

    def url(self, path: str) -> str:
        return self.stack.gateway_url + path

    async def gauges(self) -> EngineGauges:
        text = await metrics_text(self.client, self.stack.vllm_url)
        values = [promtext.total(text, name) for name in (RUNNING, WAITING, KV_USAGE)]
        if any(math.isnan(v) for v in values):
            raise RuntimeError(f"vLLM /metrics lacks one of {RUNNING}, {WAITING}, {KV_USAGE}")
        return EngineGauges(*values)

    async def settle(self, kv_baseline: float) -> tuple[EngineGauges, float, EngineGauges]:
        """Wait until vLLM is idle with KV back near `kv_baseline`: (peak, seconds, last)."""
        started = time.monotonic()
        last = await self.gauges()
        peak = last
        while not last.idle_near(kv_baseline):
            if time.monotonic() - started > SETTLE_TIMEOUT_SECONDS:
                break
            await asyncio.sleep(SETTLE_POLL_SECONDS)
            last = await self.gauges()
            if last.running > peak.running:
                peak = last
        return peak, time.monotonic() - started, last

    def processes(self) -> ProcessSample:
        gateway, entrypoint = self.stack.pid("gateway"), self.stack.pid("entrypoint")
        return ProcessSample(
            rss_bytes(gateway), rss_bytes(entrypoint), open_fds(gateway), open_fds(entrypoint)
        )
