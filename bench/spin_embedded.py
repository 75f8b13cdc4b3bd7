"""The embedded gateway, spending more CPU on vLLM's loop when a request asks: a
calibration tool, never a way to serve.

    vllm serve … --middleware bench.spin_embedded.SpinningEmbeddedGateway

`bench.embedded_overhead --spin 100,300` starts vLLM with this class instead of
`gateway.embedded.EmbeddedGateway`, and `bench.gateway_overhead --embedded-bypass TOKEN
--spin 100,300` races, beside `direct` and `embedded`, paths that send the header
`x-bench-spin-us: 100` (or 300) to the same vLLM.  Such a request first busy-loops that
many microseconds on the thread's own CPU clock, on vLLM's API server loop, then is
served exactly as `embedded` is: the line through the embedded path and its spinning
ones says what a microsecond of the gateway's per-request work on that loop costs in
TTFT (docs/gateway.md, "Overhead").  Nothing else differs from the real class: requests
without the header, and `send`, are untouched.

It also times, on the thread's CPU clock, the gateway's own work before vLLM's handler
runs (reading and preparing the request, admission: what a spin stands for), for every
request it serves.  `GET /bench/spin-embedded` answers those figures as JSON (and
starts them again), so the bench can check, before it measures, that vLLM runs this
class (the header would otherwise be ignored and the line be flat), and afterwards read
what the gateway itself spent there during the run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Receive, Scope, Send

from bench.spin_gateway import MAX_SPIN_US, spin
from gateway.embedded import EmbeddedGateway, _answer
from gateway.settings import GatewaySettings

SPIN_HEADER = b"x-bench-spin-us"
PROBE_PATH = "/bench/spin-embedded"
MIDDLEWARE = "bench.spin_embedded.SpinningEmbeddedGateway"
# Scope key: the thread's CPU clock at the start, and whether the loop has run other
# work since (a span in which the request's task waited holds that work's CPU too: it
# is counted as not timed).
_STARTED = "sparkserve.bench.started"
MAX_SAMPLES = 1_000_000


class SpinningEmbeddedGateway(EmbeddedGateway):
    """`EmbeddedGateway` that spins the microseconds a request's `x-bench-spin-us` asks
    for before handling it, and times its own work before vLLM's handler (module
    docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        settings: GatewaySettings | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(app, settings, registry)
        self.pre_forward_ns: list[int] = []
        self.dropped = 0
        handler = self.app

        async def reached(scope: Scope, receive: Receive, send: Send) -> None:
            started = scope.get(_STARTED)
            if started is not None:
                self._note(started)
            await handler(scope, receive, send)

        self.app = reached

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"] == PROBE_PATH:
                await _answer(send, 200, self.probe_answer())
                return
            for name, value in scope["headers"]:
                if name == SPIN_HEADER:
                    microseconds = spin_of(value)
                    if microseconds is None:
                        message = (
                            f'{{"error": "x-bench-spin-us: expected whole microseconds, '
                            f'0-{MAX_SPIN_US}"}}'
                        )
                        await _answer(send, 400, message.encode())
                        return
                    spin(microseconds)
                    break
            bypassed = self.bypass is not None and self._bypassed(scope)
            if not bypassed and (scope["method"], scope["path"]) in self.routes:
                turned = [False]  # set by the loop's next turn: only if this task waits
                asyncio.get_running_loop().call_soon(turned.__setitem__, 0, True)
                scope[_STARTED] = (time.thread_time_ns(), turned)
        await super().__call__(scope, receive, send)

    def _note(self, started: tuple[int, list[bool]]) -> None:
        cpu = time.thread_time_ns() - started[0]
        if started[1][0]:
            self.dropped += 1
        elif len(self.pre_forward_ns) < MAX_SAMPLES:
            self.pre_forward_ns.append(cpu)

    def probe_answer(self) -> bytes:
        """The figures since the last probe, as JSON; they start again."""
        samples, dropped = self.pre_forward_ns, self.dropped
        self.pre_forward_ns, self.dropped = [], 0
        figures: dict[str, Any] = {"requests": len(samples), "dropped": dropped}
        if samples:
            figures["mean"] = round(statistics.fmean(samples) / 1000, 1)
            figures["p50"] = round(statistics.median(samples) / 1000, 1)
        return json.dumps({"spin_header": SPIN_HEADER.decode(), "pre_forward_us": figures}).encode()


def spin_of(value: bytes) -> int | None:
    """The header's microseconds, or None when it is not a whole number 0-MAX_SPIN_US."""
    if not value.isdigit() or len(value) > 6:
        return None
    microseconds = int(value)
    return microseconds if microseconds <= MAX_SPIN_US else None
