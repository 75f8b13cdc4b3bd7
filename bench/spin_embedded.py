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

It also times, on the thread's CPU clock, the gateway's own work before it hands the
request to vLLM's handler (reading and preparing the request, admission: what a spin
stands for; up to the loop's turn before the handover, `EmbeddedGateway._turn`), for
every request it serves.  `GET /bench/spin-embedded` answers those figures as JSON (and
starts them again), so the bench can check, before it measures, that vLLM runs this
class (the header would otherwise be ignored and the line be flat), and afterwards read
what the gateway itself spent there during the run.

`x-bench-turn: off` makes a request skip the loop's turn before the handover: the
`embedded-unturned` path of `bench.gateway_overhead --unturned` (what the turn changes,
raced in the same run).  Its work before the handover is timed apart.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from contextvars import ContextVar
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Receive, Scope, Send

from bench.spin_gateway import MAX_SPIN_US, spin
from gateway.embedded import EmbeddedGateway, _answer
from gateway.settings import GatewaySettings

SPIN_HEADER = b"x-bench-spin-us"
TURN_HEADER = b"x-bench-turn"
PROBE_PATH = "/bench/spin-embedded"
MIDDLEWARE = "bench.spin_embedded.SpinningEmbeddedGateway"
# The request's: the thread's CPU clock at the start, whether the loop has run other
# work since (a span in which the request's task waited holds that work's CPU too: it
# is counted as not timed), and whether it takes the loop's turn before the handover.
_STARTED: ContextVar[tuple[int, list[bool], bool] | None] = ContextVar(
    "sparkserve_bench_started", default=None
)
MAX_SAMPLES = 1_000_000


class SpinningEmbeddedGateway(EmbeddedGateway):
    """`EmbeddedGateway` that spins the microseconds a request's `x-bench-spin-us` asks
    for before handling it, skips the loop's turn before the handover for a request
    with `x-bench-turn: off`, and times its own work before the handover (module
    docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        settings: GatewaySettings | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(app, settings, registry)
        # CPU ns before the handover, by whether the request took the loop's turn.
        self.pre_forward_ns: dict[bool, list[int]] = {True: [], False: []}
        self.dropped = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"] == PROBE_PATH:
                await _answer(send, 200, self.probe_answer())
                return
            turn = True
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
                elif name == TURN_HEADER:
                    turn = value != b"off"
            bypassed = self.bypass is not None and self._bypassed(scope)
            if not bypassed and (scope["method"], scope["path"]) in self.routes:
                turned = [False]  # set by the loop's next turn: only if this task waits
                asyncio.get_running_loop().call_soon(turned.__setitem__, 0, True)
                _STARTED.set((time.thread_time_ns(), turned, turn))
        await super().__call__(scope, receive, send)

    async def _turn(self) -> None:
        # The gateway is through with the request but for the handover: the span ends
        # here, before the loop's turn (in which other requests' work runs).
        started = _STARTED.get()
        if started is not None:
            _STARTED.set(None)
            self._note(started)
            if not started[2]:
                return
        await super()._turn()

    def _note(self, started: tuple[int, list[bool], bool]) -> None:
        cpu = time.thread_time_ns() - started[0]
        samples = self.pre_forward_ns[started[2]]
        if started[1][0]:
            self.dropped += 1
        elif len(samples) < MAX_SAMPLES:
            samples.append(cpu)

    def probe_answer(self) -> bytes:
        """The figures since the last probe, as JSON; they start again."""
        answer: dict[str, Any] = {"spin_header": SPIN_HEADER.decode()}
        for turn, key in ((True, "pre_forward_us"), (False, "pre_forward_unturned_us")):
            samples = self.pre_forward_ns[turn]
            figures: dict[str, Any] = {"requests": len(samples)}
            if turn:
                figures["dropped"] = self.dropped
            if samples:
                figures["mean"] = round(statistics.fmean(samples) / 1000, 1)
                figures["p50"] = round(statistics.median(samples) / 1000, 1)
            answer[key] = figures
        self.pre_forward_ns, self.dropped = {True: [], False: []}, 0
        return json.dumps(answer).encode()


def spin_of(value: bytes) -> int | None:
    """The header's microseconds, or None when it is not a whole number 0-MAX_SPIN_US."""
    if not value.isdigit() or len(value) > 6:
        return None
    microseconds = int(value)
    return microseconds if microseconds <= MAX_SPIN_US else None
