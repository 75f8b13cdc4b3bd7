"""Gateway overhead: TTFT and stream throughput, direct vs through the gateway.

    python -m bench.gateway_overhead                       # synthetic SSE upstream
    python -m bench.gateway_overhead --vllm-url URL        # a running vLLM (model `tiny`)

Starts the upstream (unless --vllm-url) and `python -m gateway` (auth off) as
child processes, then for 1, 8 and 32 concurrent streams runs direct and
gateway rounds interleaved, and prints TTFT p50/p99 and aggregate events/s with
the gateway/direct ratios.  The synthetic upstream isolates the gateway's own
cost; figures against it are reported, not targeted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

CONCURRENCY = (1, 8, 32)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- synthetic upstream: a tiny asyncio HTTP/1.1 server streaming SSE ----

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'


async def _handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, events: int, gap_s: float
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            if head.startswith(b"GET /health"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for _ in range(events):
                await asyncio.sleep(gap_s)
                writer.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
            done = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _serve_synthetic(port: int, events: int, gap_s: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, events, gap_s), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


# ---- load generator ----


@dataclass
class Round:
    ttft_s: list[float] = field(default_factory=list)
    events: int = 0
    wall_s: float = 0.0


async def _one_stream(client: httpx.AsyncClient, url: str, max_tokens: int, out: Round) -> None:
    body = {
        "model": "tiny",
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "count to a hundred"}],
    }
    started = time.monotonic()
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        first = True
        async for line in response.aiter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                if first:
                    out.ttft_s.append(time.monotonic() - started)
                    first = False
                out.events += 1


async def _round(url: str, streams: int, max_tokens: int) -> Round:
    out = Round()
    limits = httpx.Limits(max_connections=streams)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        started = time.monotonic()
        await asyncio.gather(*(_one_stream(client, url, max_tokens, out) for _ in range(streams)))
        out.wall_s = time.monotonic() - started
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(direct: str, gateway: str, rounds: int, max_tokens: int) -> None:
    print(f"{'streams':>7} {'path':>8} {'ttft p50 ms':>12} {'ttft p99 ms':>12} {'events/s':>10}")
    for streams in CONCURRENCY:
        results: dict[str, list[Round]] = {"direct": [], "gateway": []}
        for _ in range(rounds):  # interleaved: direct, gateway, direct, gateway …
            for name, url in (("direct", direct), ("gateway", gateway)):
                results[name].append(await _round(url, streams, max_tokens))
        summary = {}
        for name, runs in results.items():
            ttft = [t for r in runs for t in r.ttft_s]
            rate = statistics.mean(r.events / r.wall_s for r in runs)
            summary[name] = (_pct(ttft, 0.5), _pct(ttft, 0.99), rate)
            p50, p99, rate = summary[name]
            print(f"{streams:>7} {name:>8} {p50 * 1000:>12.1f} {p99 * 1000:>12.1f} {rate:>10.0f}")
        d, g = summary["direct"], summary["gateway"]
        print(
            f"{streams:>7} {'ratio':>8} {g[0] / d[0]:>12.3f} {g[1] / d[1]:>12.3f} "
            f"{g[2] / d[2]:>10.3f}"
        )


def _wait_ready(url: str, path: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}{path} not ready")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-url", help="benchmark against this vLLM instead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=64, help="tokens per stream")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="synthetic token gap")
    args = parser.parse_args(argv)
    children = []
    try:
        upstream = args.vllm_url
        if upstream is None:
            port = free_port()
            code = (
                "import asyncio, bench.gateway_overhead as b; "
                f"asyncio.run(b._serve_synthetic({port}, {args.events}, {args.gap_ms / 1000}))"
            )
            children.append(subprocess.Popen([sys.executable, "-c", code]))
            upstream = f"http://127.0.0.1:{port}"
        _wait_ready(upstream, "/health")
        gw_port = free_port()
        env = {
            **os.environ,
            "GATEWAY_UPSTREAM_URL": upstream,
            "GATEWAY_AUTH": "off",
            "GATEWAY_PORT": str(gw_port),
            "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_SALT_SECRET": "bench",
            "GATEWAY_LOG_LEVEL": "warning",
        }
        children.append(subprocess.Popen([sys.executable, "-m", "gateway"], env=env))
        gateway = f"http://127.0.0.1:{gw_port}"
        _wait_ready(gateway, "/healthz")
        print(
            f"upstream {upstream} ({'vLLM' if args.vllm_url else 'synthetic'}), "
            f"{args.events} tokens/stream, {args.rounds} interleaved rounds"
        )
        asyncio.run(_measure(upstream, gateway, args.rounds, args.events))
    finally:
        for child in children:
            child.terminate()
            child.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
