"""What the embedded gateway costs vLLM's API server loop, per request and per event.

    python -m bench.embedded_cost                       # 3,000 requests per case
    python -m bench.embedded_cost --requests 500 --repeats 3

The embedded gateway (`gateway/embedded.py`) runs on the same event loop as vLLM's
handlers, so every µs it spends there delays the rest of a burst (docs/gateway.md,
"Embedded in vLLM").  This times it in-process, with no vLLM and no sockets: a
stand-in for vLLM's app answers each streamed chat with `tokens` token events as vLLM
writes them (one `data:` event a message), then the usage chunk the gateway asked for
and `[DONE]`.  Each case runs the stand-in alone and wrapped in `EmbeddedGateway`,
alternating, in a hot loop (`--repeats` times, the median kept); the gateway's cost is
the difference.  Two cases, 2 and 64 tokens, give the cost per request and per event
by a straight line through them.  A hot loop is the floor: on a loaded machine, with
cold caches, each figure is larger.  The requests come one at a time here, so the
loop's turn before each handover (`EmbeddedGateway._turn`) is a whole iteration of the
loop, which a burst's requests share.  `GATEWAY_*` settings in the environment apply
(the keys and the salt secret are set here), so a layout rule or `GATEWAY_LAYOUT=off`
can be timed too.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bench.gateway_overhead import per_request_and_event, stream_body
from bench.synthetic_sse import DONE, EVENT, USAGE_EVENT
from gateway.embedded import EmbeddedGateway, load_embedded_settings
from gateway.errors import ConfigError

API_KEY = "sk-bench"
SHORT, LONG = 2, 64  # tokens per stream of the two cases
WARMUP_REQUESTS = 200


def stream_chunks(tokens: int) -> list[bytes]:
    """What vLLM's chat handler writes for a stream of `tokens` tokens with usage asked
    (the synthetic upstream's events, bench.gateway_overhead)."""
    return [EVENT] * tokens + [USAGE_EVENT, DONE]


class StandIn:
    """Stands in for vLLM's app: reads the body, answers with the chunks of a stream."""

    def __init__(self, tokens: int) -> None:
        self.chunks = stream_chunks(tokens)
        self.headers = [(b"content-type", b"text/event-stream; charset=utf-8")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def request(tokens: int) -> tuple[Scope, bytes]:
    """The bench's streamed chat (bench.gateway_overhead), as vLLM's server hands it over."""
    body = stream_body("tiny", tokens)
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {API_KEY}".encode()),
        (b"content-length", b"%d" % len(body)),
    ]
    scope: Scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": headers,
    }
    return scope, body


def _receiver(body: bytes) -> Receive:
    """The request's body in one message, then a client that stays (no disconnect)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return receive


async def _run(app: ASGIApp, scope: Scope, body: bytes, count: int) -> float:
    """Seconds per request for `count` requests through `app`, one after another."""
    statuses: list[int] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.perf_counter()
    for _ in range(count):
        await app(scope, _receiver(body), send)
    elapsed = (time.perf_counter() - started) / count
    if statuses != [200] * count:
        raise RuntimeError(f"the gateway did not answer 200 to every request: {set(statuses)}")
    return elapsed


@dataclass(frozen=True)
class Case:
    tokens: int
    alone_us: float  # the stand-in alone, per request
    through_us: float  # wrapped in the embedded gateway

    @property
    def added_us(self) -> float:
        return self.through_us - self.alone_us


def measure(tokens: int, requests: int, repeats: int, state_dir: Path) -> Case:
    settings = load_embedded_settings(
        api_keys=f"bench:{API_KEY}", salt_secret="bench-secret", state_dir=state_dir
    )
    inner = StandIn(tokens)
    gateway = EmbeddedGateway(inner, settings=settings, registry=CollectorRegistry())
    scope, body = request(tokens)

    async def both() -> tuple[list[float], list[float]]:
        await _run(inner, scope, body, WARMUP_REQUESTS)
        await _run(gateway, scope, body, WARMUP_REQUESTS)
        alone, through = [], []
        for _ in range(repeats):  # alternated, so a slow spell of the machine hits both
            alone.append(await _run(inner, scope, body, requests))
            through.append(await _run(gateway, scope, body, requests))
        return alone, through

    alone, through = asyncio.run(both())
    return Case(tokens, statistics.median(alone) * 1e6, statistics.median(through) * 1e6)


def split(short: Case, long: Case) -> tuple[float, float]:
    """(µs per request, µs per event) of the gateway, from two cases' added cost; an
    event is one of the stream's token events (the usage chunk and [DONE] are per
    request)."""
    return per_request_and_event(short.tokens, short.added_us, long.tokens, long.added_us)


def table(cases: Sequence[Case], per_request: float, per_event: float) -> str:
    lines = [
        "| tokens a stream | stand-in alone µs/request | through the gateway µs/request "
        "| gateway adds µs |",
        "|---|---|---|---|",
    ]
    for case in cases:
        lines.append(
            f"| {case.tokens} | {case.alone_us:.1f} | {case.through_us:.1f} | {case.added_us:.1f} |"
        )
    lines.append("")
    lines.append(
        f"embedded gateway on vLLM's loop: {per_request:.1f} µs per request + "
        f"{per_event:.2f} µs per token event (hot loop, in-process)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.embedded_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--requests", type=int, default=3000, help="requests per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per path (median)")
    args = parser.parse_args(argv)
    for name in ("requests", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    with tempfile.TemporaryDirectory(prefix="sparkserve-embedded-cost-") as state:
        try:
            cases = [measure(t, args.requests, args.repeats, Path(state)) for t in (SHORT, LONG)]
        except ConfigError as exc:  # a bad GATEWAY_* setting in the environment
            raise SystemExit(f"bench.embedded_cost: {exc.message}") from None
    per_request, per_event = split(*cases)
    print(table(cases, per_request, per_event))
    return 0


if __name__ == "__main__":
    sys.exit(main())
