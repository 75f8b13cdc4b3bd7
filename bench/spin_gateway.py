"""`python -m bench.spin_gateway`: the gateway, spending `BENCH_SPIN_US` microseconds more
CPU on every proxied request.  A calibration tool, never a way to serve.

`bench.gateway_overhead --spin 100,300` races such gateways beside the real one to
measure how much a microsecond of per-request gateway CPU costs in TTFT on this machine
(docs/gateway.md, "Overhead").  The extra work is a busy loop on the thread's own CPU
clock when each proxied response starts (`ProxyResponse.__call__`, before it forwards),
so it adds that much CPU whether or not the process is preempted meanwhile, and nothing
else changes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from gateway import __main__ as gateway_main
from gateway.proxy import ProxyResponse

ENV = "BENCH_SPIN_US"
MAX_SPIN_US = 100_000


def spin(microseconds: float) -> None:
    """Burn `microseconds` of this thread's CPU time."""
    end = time.thread_time_ns() + int(microseconds * 1000)
    while time.thread_time_ns() < end:
        pass


def install(microseconds: float) -> None:
    """Make every gateway app of this process spin `microseconds` per proxied request."""
    original = ProxyResponse.__call__

    async def serve(self: ProxyResponse, *args: Any, **kwargs: Any) -> None:
        spin(microseconds)
        await original(self, *args, **kwargs)

    ProxyResponse.__call__ = serve  # type: ignore[method-assign]


def spin_from_env(environ: Mapping[str, str]) -> float:
    """The spin from `BENCH_SPIN_US`; ValueError saying what is allowed otherwise."""
    raw = environ.get(ENV, "")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_SPIN_US:
        raise ValueError(f"{ENV}={raw!r}: expected microseconds per request, 0-{MAX_SPIN_US}")
    return value


def main() -> int:
    try:
        microseconds = spin_from_env(os.environ)
    except ValueError as exc:
        print(f"bench.spin_gateway: {exc}", file=sys.stderr)
        return 2
    install(microseconds)
    return gateway_main.main()


if __name__ == "__main__":
    sys.exit(main())
