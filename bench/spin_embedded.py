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

`GET /bench/spin-embedded` answers `PROBE_ANSWER` so the bench can check, before it measures, that
vLLM runs this class (the header would otherwise be ignored and the line be flat).
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from bench.spin_gateway import MAX_SPIN_US, spin
from gateway.embedded import EmbeddedGateway, _answer

SPIN_HEADER = b"x-bench-spin-us"
PROBE_PATH = "/bench/spin-embedded"
PROBE_ANSWER = b'{"spin": "x-bench-spin-us"}'
MIDDLEWARE = "bench.spin_embedded.SpinningEmbeddedGateway"


class SpinningEmbeddedGateway(EmbeddedGateway):
    """`EmbeddedGateway` that spins the microseconds a request's `x-bench-spin-us` asks
    for before handling it (module docstring)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"] == PROBE_PATH:
                await _answer(send, 200, PROBE_ANSWER)
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
        await super().__call__(scope, receive, send)


def spin_of(value: bytes) -> int | None:
    """The header's microseconds, or None when it is not a whole number 0-MAX_SPIN_US."""
    if not value.isdigit() or len(value) > 6:
        return None
    microseconds = int(value)
    return microseconds if microseconds <= MAX_SPIN_US else None
