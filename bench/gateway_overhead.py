"""Gateway overhead: TTFT and stream throughput, direct vs through the gateway.

    python -m bench.gateway_overhead                       # synthetic SSE upstream
    python -m bench.gateway_overhead --vllm-url URL        # a running vLLM (served name `tiny`)
    python -m bench.gateway_overhead --clients aiohttp,httpx   # one gateway per upstream client
    python -m bench.gateway_overhead --py-spy /tmp/gw.svg  # then profile the gateway at 32 streams
    python -m bench.gateway_overhead --cpu-cost            # gateway CPU per request / per event
    python -m bench.gateway_overhead --vllm-url URL --nginx  # also race nginx as a plain proxy
    python -m bench.gateway_overhead --vllm-url URL --also name=http://127.0.0.1:8081
                                                           # also race another proxy of that vLLM
    python -m bench.gateway_overhead --vllm-url URL --save run1.json   # keep every round
    python -m bench.gateway_overhead --pool run1.json run2.json        # report runs as one
    python -m bench.gateway_overhead --vllm-url URL --embedded-bypass TOKEN --nginx
                       # that vLLM runs the gateway inside it (gateway/embedded.py) with
                       # GATEWAY_EMBEDDED_BYPASS_TOKEN=TOKEN: race it with and without
    python -m bench.gateway_overhead --vllm-url URL --spin 100,300
                       # also race gateways spending 100 and 300 us more CPU per request:
                       # what a us of per-request CPU costs in TTFT, and a gateway with none
    python -m bench.gateway_overhead --vllm-url URL --embedded-bypass TOKEN --spin 100,300
                       # the same for the embedded gateway: that vLLM runs
                       # bench.spin_embedded.SpinningEmbeddedGateway, which spins on
                       # vLLM's loop what the header x-bench-spin-us asks
    python -m bench.gateway_overhead --vllm-url URL --embedded-bypass TOKEN --server-pid PID
                       # also charge each round vLLM's API server CPU (PID): what each
                       # path costs that process per stream, under the run's own load;
                       # --additions also races vLLM sent what the gateway adds

Starts the upstream (unless --vllm-url) and `python -m gateway` (auth off; one
per `--clients` entry) as child processes, then for 1, 8 and 32 concurrent
streams runs rounds on every path (direct, each gateway), interleaved in a
rotating order so each path runs in each position equally often, after one
discarded warm-up round per path.  It prints TTFT p50/p99 and aggregate
tokens/s with the gateway/direct ratios, pooled over all rounds (`/d`) and as
the median of round-by-round ratios against the adjacent direct round (`/d pair`,
robust to vLLM's own drift and stalls on a small shared machine), each with a 95 %
bootstrap interval over rounds (bench/overhead_stats.py), then a verdict on issue
6's targets at the highest concurrency: met or missed only when the whole interval
says so, else undecided.  The synthetic upstream isolates the gateway's own cost;
figures against it are reported, not targeted.

The load generator is kept cheap so it does not eat the CPU the gateway and the
upstream need on a small machine: aiohttp (C HTTP parser) on uvloop, one
keep-alive session per path (connection set-up is not counted), a pre-encoded
body, and a stream's tokens counted once its `[DONE]` arrives instead of parsed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.launcher import free_port
from bench.overhead_report import (
    DIRECT,
    EMBEDDED,
    Round,
    load_rounds,
    print_burst,
    print_calibration,
    print_header,
    print_level,
    print_server_cpu,
    print_targets,
    report,
    save_rounds,
    saved_cpu_per_request_us,
    spin_name,
)
from bench.overhead_stats import Ratios
from bench.proxies import start_gateway, start_nginx, wait_ready
from bench.schedwait import WaitMeter, cpu_time, describe
from bench.spin_embedded import MIDDLEWARE as SPIN_MIDDLEWARE
from bench.spin_embedded import PROBE_PATH
from bench.spin_embedded import SPIN_HEADER as SPIN_HEADER_BYTES
from bench.spin_embedded import TURN_HEADER as TURN_HEADER_BYTES
from bench.synthetic_sse import DONE, install_uvloop
from entrypoint.interrupt import run_interruptible
from gateway.prepare import request_usage

CONCURRENCY = (1, 8, 32)
CPU_COST_EVENTS = (2, 64)
KEEPALIVE_S = 4.0
BYPASS_HEADER = "x-sparkserve-bypass"  # gateway/embedded.py


# ---- load generator ----


def stream_body(model: str, max_tokens: int, additions: bool = False) -> bytes:
    """The bench's request: a short streamed chat of exactly `max_tokens` tokens; with
    `additions`, what the gateway adds to it before vLLM sees it: a tenant's cache salt
    in the gateway's form (64 hex digits; gateway/tenancy.py's is an HMAC-SHA256) and
    the usage request (gateway/prepare.py's `request_usage`)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "count to a hundred"}],
    }
    if additions:
        body["cache_salt"] = hashlib.sha256(b"bench tenant").hexdigest()
        request_usage(body)
    return json.dumps(body).encode()


async def _one_stream(
    session: aiohttp.ClientSession, url: str, body: bytes, tokens: int, out: Round
) -> None:
    """One stream; it counts `tokens` (its max_tokens, exact with ignore_eos) once its
    `[DONE]` arrived.  Events are not counted: vLLM merges several tokens into one
    event when its API server lags, so events/s would favour the slower path."""
    started = time.perf_counter()
    first: float | None = None
    done, tail = False, b""
    headers = {"content-type": "application/json"}
    try:
        async with session.post(url + "/v1/chat/completions", data=body, headers=headers) as resp:
            if resp.status != 200:
                out.failed(f"status {resp.status}")
                return
            async for chunk in resp.content.iter_any():
                if first is None and b"data:" in chunk:
                    first = time.perf_counter()
                tail = (tail + chunk)[-len(DONE) :]  # [DONE] may straddle two reads
                done = done or DONE.strip() in tail
    except aiohttp.ClientError as exc:
        out.failed(type(exc).__name__)
        return
    if not done:
        out.failed("no [DONE]")
        return
    if first is not None:
        out.ttft_s.append(first - started)
    out.tokens += tokens


async def _round(
    session: aiohttp.ClientSession,
    url: str,
    streams: int,
    body: bytes,
    tokens: int,
    server_pid: int | None = None,
) -> Round:
    """One round of `streams` streams at once; with `server_pid`, the CPU that process
    ran meanwhile (`Round.server_cpu_s`)."""
    out = Round()
    cpu = cpu_time(server_pid) if server_pid is not None else 0.0
    started = time.perf_counter()
    await asyncio.gather(*(_one_stream(session, url, body, tokens, out) for _ in range(streams)))
    out.wall_s = time.perf_counter() - started
    if server_pid is not None:
        out.server_cpu_s = cpu_time(server_pid) - cpu
    return out


CALIBRATION_CPU_ROUNDS = 20
SPIN_HEADER = SPIN_HEADER_BYTES.decode()
TURN_HEADER = TURN_HEADER_BYTES.decode()
# The embedded gateway without the loop's turn before the handover (--unturned).
UNTURNED = "embedded-unturned"
# vLLM without the gateway, sent what the gateway adds to a request (--additions).
ADDITIONS = "direct+additions"


async def _measure_level(
    sessions: dict[str, aiohttp.ClientSession],
    urls: dict[str, str],
    streams: int,
    rounds: int,
    body: bytes,
    tokens: int,
    server_pid: int | None = None,
    bodies: dict[str, bytes] | None = None,
) -> dict[str, list[Round]]:
    names = list(urls)
    sent = {name: (bodies or {}).get(name, body) for name in names}
    for name in names:  # warm-up: connections, caches, JIT-free but lazy imports
        await _round(sessions[name], urls[name], streams, sent[name], tokens)
    results: dict[str, list[Round]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            results[name].append(
                await _round(sessions[name], urls[name], streams, sent[name], tokens, server_pid)
            )
    return results


async def _measure(
    urls: dict[str, str],
    levels: Sequence[int],
    rounds: int,
    body: bytes,
    tokens: int,
    headers: dict[str, dict[str, str]] | None = None,
    server_pid: int | None = None,
    bodies: dict[str, bytes] | None = None,
) -> tuple[dict[int, dict[str, list[Round]]], dict[int, dict[str, Ratios]]]:
    """Every round by concurrency and path (`headers`: sent on every request of a
    path; `server_pid`: the process whose CPU each round is charged; `bodies`: a path's
    own request instead of `body`), and the ratios printed for each level."""
    timeout = aiohttp.ClientTimeout(total=600)
    sessions = {
        name: aiohttp.ClientSession(
            connector=_connector(), timeout=timeout, headers=(headers or {}).get(name)
        )
        for name in urls
    }
    table: dict[int, dict[str, list[Round]]] = {}
    ratios: dict[int, dict[str, Ratios]] = {}
    try:
        print_header(list(urls))
        for streams in levels:
            table[streams] = await _measure_level(
                sessions, urls, streams, rounds, body, tokens, server_pid, bodies
            )
            ratios[streams] = print_level(streams, table[streams])
    finally:
        for session in sessions.values():
            await session.close()
    return table, ratios


def spinning_answer(url: str) -> dict[str, Any] | None:
    """What the spinning embedded gateway (bench/spin_embedded.py) in the vLLM at `url`
    answers at its probe (the work it timed before the handover since it was last asked,
    with and without the loop's turn), or None when that vLLM does not run it."""
    try:
        answer = httpx.get(url + PROBE_PATH, timeout=10)
        figures = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(figures, dict) or figures.get("spin_header") != SPIN_HEADER:
        return None
    return figures


def _check_spinning_vllm(url: str) -> None:
    """`--spin` or `--unturned` with `--embedded-bypass`: the vLLM must run the
    calibration class, or its headers would be ignored (the calibration line flat, the
    unturned path the embedded one)."""
    if spinning_answer(url) is None:
        raise SystemExit(
            f"--spin/--unturned with --embedded-bypass: {url} does not run the spinning "
            f"embedded gateway (GET {PROBE_PATH} did not answer as it does).  Start vLLM with "
            f"--middleware {SPIN_MIDDLEWARE} (bench.embedded_overhead --spin or --unturned does)"
        )


def _embedded_own_us(url: str) -> float | None:
    """After a `--spin` or `--unturned` run: the embedded gateway's mean CPU per request
    before the handover, on vLLM's loop during the run (printed, and that of the
    `embedded-unturned` requests when there were any; None when it timed none)."""
    answer = spinning_answer(url) or {}
    own = _print_timed(answer.get("pre_forward_us"), "")
    if own is None:
        print("the embedded gateway timed no request before the handover")
    _print_timed(answer.get("pre_forward_unturned_us"), ", unturned")
    return own


def _print_timed(figures: object, which: str) -> float | None:
    """Print one kind of request's timing from the probe; its mean, None if none."""
    if not isinstance(figures, dict):
        return None
    mean, n, dropped = figures.get("mean"), figures.get("requests", 0), figures.get("dropped")
    if not isinstance(mean, int | float) or not n:
        return None
    untimed = (
        ""
        if dropped is None
        else f" ({dropped} not timed: the request waited and the loop ran other work meanwhile)"
    )
    print(
        f"the embedded gateway's own CPU before the handover{which}, on vLLM's loop in "
        f"this run: mean {mean:.1f} us, p50 {figures.get('p50')} us over {n} requests{untimed}"
    )
    return float(mean)


def _connector() -> aiohttp.TCPConnector:
    # Idle connections are dropped before uvicorn's 5 s keep-alive timeout
    # (vLLM's and the gateway's): reusing one the server is closing at that moment
    # fails the request, a client-side artefact that is not either path's fault.
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)


async def _load_for(url: str, streams: int, body: bytes, tokens: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=_connector()) as session:
        while time.monotonic() < deadline:
            await _round(session, url, streams, body, tokens)


def _profile(
    gateway: str, pid: int, streams: int, body: bytes, tokens: int, svg: str, seconds: float
) -> None:
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    fmt = "flamegraph" if svg.endswith(".svg") else "raw"  # raw: collapsed stacks
    cmd = [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "-o", svg]
    cmd += ["--format", fmt]
    recorder = subprocess.Popen([*cmd, "--rate", "250", "--nonblocking"])
    asyncio.run(_load_for(gateway, streams, body, tokens, seconds + 1))
    recorder.wait(60)
    print(f"py-spy profile of the gateway at {streams} streams: {svg}")


# ---- CPU cost per request and per event (synthetic upstream) ----


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_cost(source: str | None, streams: int, rounds: int) -> tuple[float, float]:
    """(CPU seconds per request, per streamed event) of a gateway, from two runs
    against the synthetic upstream that differ only in events per stream (2 and 64):
    the difference is the per-event cost, the rest the per-request cost."""
    spent: dict[int, float] = {}
    for events in CPU_COST_EVENTS:
        port = free_port()
        code = f"import bench.synthetic_sse as s; s.serve({port}, {events}, 0.005)"
        upstream = subprocess.Popen([sys.executable, "-c", code])
        gateway: subprocess.Popen[bytes] | None = None
        try:
            wait_ready(f"http://127.0.0.1:{port}", "/health", proc=upstream)
            gateway, url = start_gateway(f"http://127.0.0.1:{port}", None, source)
            wait_ready(url, "/healthz", proc=gateway, what=f"the gateway at {url}")
            spent[events] = asyncio.run(_cpu_of_rounds(gateway.pid, url, streams, rounds, events))
        finally:
            for child in (gateway, upstream):
                if child is not None:
                    child.terminate()
                    child.wait(10)
    requests = streams * rounds
    low, high = CPU_COST_EVENTS
    return per_request_and_event(low, spent[low] / requests, high, spent[high] / requests)


def per_request_and_event(
    low_events: int, low_cost: float, high_events: int, high_cost: float
) -> tuple[float, float]:
    """(cost per request, cost per event) from the cost of one request at two stream
    lengths: the straight line through them."""
    per_event = (high_cost - low_cost) / (high_events - low_events)
    return low_cost - low_events * per_event, per_event


async def _cpu_of_rounds(pid: int, url: str, streams: int, rounds: int, events: int) -> float:
    body = stream_body("tiny", events)
    async with aiohttp.ClientSession(connector=_connector()) as session:
        await _round(session, url, streams, body, events)  # warm-up
        before = _cpu_seconds(pid)
        for _ in range(rounds):
            await _round(session, url, streams, body, events)
        return _cpu_seconds(pid) - before


def _print_cpu_cost(paths: dict[str, str | None], streams: int, rounds: int) -> None:
    print(f"gateway CPU at {streams} streams, {rounds} rounds (synthetic upstream):")
    print(f"{'path':>12} {'per request us':>15} {'per event us':>13}")
    for name, source in paths.items():
        per_request, per_event = cpu_cost(source, streams, rounds)
        print(f"{name:>12} {per_request * 1e6:>15.0f} {per_event * 1e6:>13.1f}")


def _also(specs: list[str]) -> list[tuple[str, str]]:
    """`NAME=URL` pairs from `--also`."""
    pairs = []
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise SystemExit(f"--also {spec!r}: expected NAME=http://host:port")
        pairs.append((name, url.rstrip("/")))
    return pairs


def _spins(text: str) -> list[int]:
    """`--spin 100,300`: distinct whole microseconds, 1-100000."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not 1 <= v <= 100_000 for v in values) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected distinct whole microseconds per request, 1-100000, "
            "comma-separated (e.g. 100,300)"
        )
    return values


def _pid(text: str) -> int:
    """A running process's id, for `--server-pid`."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (a positive integer)")
    if not Path(f"/proc/{int(text)}/task").is_dir():
        raise argparse.ArgumentTypeError(f"no process {text} to measure (Linux /proc)")
    return int(text)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--vllm-url", help="benchmark against this vLLM instead")
    parser.add_argument("--model", default="tiny", help="served model name (with --vllm-url)")
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds per path")
    parser.add_argument("--events", type=int, default=64, help="tokens per stream")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="synthetic token gap")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    parser.add_argument("--clients", default="", help="comma list: one gateway per client")
    parser.add_argument("--before", metavar="DIR", help="also race the gateway in this checkout")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="also race this proxy of the upstream, e.g. nginx or another gateway "
        "(/health or /healthz must answer 200)",
    )
    parser.add_argument(
        "--nginx",
        action="store_true",
        help="also race nginx as a plain streaming reverse proxy (needs the nginx binary)",
    )
    parser.add_argument(
        "--spin",
        type=_spins,
        default=[],
        metavar="US[,US...]",
        help="also race copies of the gateway spending this many us more CPU per request "
        "(bench/spin_gateway.py) and fit what a us costs in TTFT",
    )
    parser.add_argument(
        "--unturned",
        action="store_true",
        help="with --embedded-bypass, against the calibration class "
        "(bench.embedded_overhead --unturned starts it): also race embedded-unturned, the "
        "embedded gateway without the loop's turn before the handover",
    )
    parser.add_argument(
        "--embedded-bypass",
        metavar="TOKEN",
        help="with --vllm-url: that vLLM runs the embedded gateway (gateway/embedded.py) "
        "with GATEWAY_EMBEDDED_BYPASS_TOKEN=TOKEN; race it against the same vLLM with the "
        "gateway bypassed (direct, and nginx with --nginx); no standalone gateway",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="with --embedded-bypass: the key the embedded path sends (a gateway with "
        "GATEWAY_AUTH=on)",
    )
    parser.add_argument(
        "--additions",
        action="store_true",
        help="with --embedded-bypass: also race direct+additions, vLLM without the gateway "
        "sent what the gateway adds to each request (a cache salt, the usage request): "
        "vLLM's own share of the gateway's cost",
    )
    parser.add_argument(
        "--server-pid",
        type=_pid,
        metavar="PID",
        help="charge each round the CPU this process ran meanwhile (all its threads) and "
        "print it per stream and path: vLLM's API server, whose loop the embedded gateway "
        "shares (bench.embedded_overhead passes its vLLM's)",
    )
    parser.add_argument("--py-spy", metavar="SVG", help="then profile the first gateway")
    parser.add_argument("--profile-seconds", type=float, default=10.0)
    parser.add_argument(
        "--cpu-cost",
        action="store_true",
        help="instead: the gateway's CPU per request and per event (synthetic upstream)",
    )
    parser.add_argument("--save", metavar="JSON", help="also write every round to this file")
    parser.add_argument(
        "--pool",
        nargs="+",
        metavar="JSON",
        help="instead: report runs saved by --save as one (each ratio taken within each "
        "run against its own direct rounds, the runs combined by rounds)",
    )
    return parser.parse_args(argv)


# The characters a bypass token may hold: URL-safe, so nginx's config takes it as is.
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")


def _check_embedded(args: argparse.Namespace) -> None:
    if args.api_key and not args.embedded_bypass:
        raise SystemExit("--api-key is for the embedded path: it needs --embedded-bypass")
    if args.unturned and not args.embedded_bypass:
        raise SystemExit(
            "--unturned races the embedded gateway without its loop turn: it needs "
            "--embedded-bypass (bench.embedded_overhead --unturned)"
        )
    if args.additions and not args.embedded_bypass:
        raise SystemExit(
            "--additions sends vLLM what the embedded gateway adds, round the gateway: it "
            "needs --embedded-bypass (bench.embedded_overhead --additions)"
        )
    if not args.embedded_bypass:
        return
    if not TOKEN_CHARS.fullmatch(args.embedded_bypass):
        raise SystemExit(
            "--embedded-bypass: the token may hold only letters, digits, '-', '_', '.' and "
            "'~' (it goes into nginx's config as a header value; the entrypoint's tokens "
            "and bench.embedded_overhead's are such)"
        )
    if not args.vllm_url:
        raise SystemExit(
            "--embedded-bypass needs --vllm-url: the vLLM started with "
            "--middleware gateway.embedded.EmbeddedGateway and that token"
        )
    clash = [
        flag
        for flag, given in (
            ("--clients", args.clients),
            ("--before", args.before),
            ("--py-spy", args.py_spy),
            ("--cpu-cost", args.cpu_cost),
        )
        if given
    ]
    if clash:
        raise SystemExit(
            f"--embedded-bypass starts no standalone gateway, so {', '.join(clash)} "
            "cannot apply (race the standalone gateway in a run of its own)"
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    return run_interruptible("gateway_overhead", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    if args.pool:
        report(load_rounds(args.pool), saved_cpu_per_request_us(args.pool))
        return 0
    _check_embedded(args)
    install_uvloop()
    levels = [int(n) for n in args.concurrency.split(",")]
    if args.cpu_cost:
        paths: dict[str, str | None] = {"gateway": None}
        if args.before:
            paths["gw-before"] = args.before
        _print_cpu_cost(paths, levels[-1], args.rounds)
        return 0
    also = _also(args.also)
    own_us = None
    if args.spin and not args.embedded_bypass:  # for the calibration's extrapolation
        own_us = cpu_cost(None, levels[-1], CALIBRATION_CPU_ROUNDS)[0] * 1e6
    children: list[subprocess.Popen[bytes]] = []
    stack = contextlib.ExitStack()  # scratch directories, removed after the children stop
    try:
        upstream = args.vllm_url
        if upstream is None:
            port = free_port()
            code = (
                "import bench.synthetic_sse as s; "
                f"s.serve({port}, {args.events}, {args.gap_ms / 1000})"
            )
            children.append(subprocess.Popen([sys.executable, "-c", code]))
            upstream = f"http://127.0.0.1:{port}"
        wait_ready(upstream, "/health")
        urls = {DIRECT: upstream}
        gateways: dict[str, subprocess.Popen[bytes]] = {}
        proxies: dict[str, int] = {}  # other proxies this bench started, by name
        bypass = {BYPASS_HEADER: args.embedded_bypass} if args.embedded_bypass else {}
        if bypass:  # the gateway is inside this vLLM: direct (and nginx) go round it
            urls[EMBEDDED] = upstream
        for client in [c for c in args.clients.split(",") if c] or ([] if bypass else [None]):
            child, url = start_gateway(upstream, client)
            children.append(child)
            wait_ready(url, "/healthz", proc=child, what=f"the gateway at {url}")
            name = "gw-" + client if client else "gateway"
            urls[name], gateways[name] = url, child
        spin_headers: dict[str, dict[str, str]] = {}
        if bypass and (args.spin or args.unturned):  # the calibration class (can it?)
            _check_spinning_vllm(upstream)
            for spin_us in args.spin:  # the same vLLM, asked per request to spin
                urls[spin_name(spin_us, embedded=True)] = upstream
                spin_headers[spin_name(spin_us, embedded=True)] = {SPIN_HEADER: str(spin_us)}
            if args.unturned:
                urls[UNTURNED] = upstream
                spin_headers[UNTURNED] = {TURN_HEADER: "off"}
        for spin_us in args.spin if not bypass else []:
            child, url = start_gateway(upstream, None, spin_us=spin_us)
            children.append(child)
            wait_ready(url, "/healthz", proc=child, what=f"the gateway at {url}")
            urls[spin_name(spin_us)] = url
        if bypass and args.additions:
            urls[ADDITIONS] = upstream
        if args.before:
            child, url = start_gateway(upstream, None, args.before)
            children.append(child)
            wait_ready(url, "/healthz", proc=child, what=f"the gateway at {url}")
            urls["gw-before"] = url
        if args.nginx:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-nginx-"))
            child, url = start_nginx(upstream, scratch, bypass)
            children.append(child)
            also.append(("nginx", url))
            proxies["nginx"] = child.pid
        for name, url in also:  # a proxy of vLLM (/health) or another sparkserve gateway
            wait_ready(url, "/health", "/healthz")
            urls[name] = url
        kind = "vLLM" if args.vllm_url else f"synthetic, {args.gap_ms:g} ms token gap"
        print(
            f"upstream {upstream} ({kind}), {args.events} tokens/stream, "
            f"{args.rounds} measured rounds per path, interleaved; {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        body = stream_body(args.model if args.vllm_url else "tiny", args.events)
        meter = WaitMeter(
            {"client": os.getpid()}
            | {name: child.pid for name, child in gateways.items()}
            | proxies
        )
        headers = {DIRECT: bypass} if bypass else {}
        bodies = {}
        if ADDITIONS in urls:  # vLLM as direct, sent the gateway's additions
            headers[ADDITIONS] = bypass
            bodies[ADDITIONS] = stream_body(args.model, args.events, additions=True)
        if args.api_key:  # every path through the embedded gateway sends the key
            for name in [EMBEDDED, *spin_headers]:
                headers[name] = {"authorization": f"Bearer {args.api_key}"}
        for name, spin_header in spin_headers.items():
            headers[name] = headers.get(name, {}) | spin_header
        table, ratios = asyncio.run(
            _measure(urls, levels, args.rounds, body, args.events, headers, args.server_pid, bodies)
        )
        waits = meter.shares()
        print(describe(waits))
        if spin_headers:
            own_us = _embedded_own_us(upstream)
            if not args.spin:  # no line to extrapolate along
                own_us = None
        if ratios:
            top = max(ratios)
            print_targets(top, ratios[top])
            print_calibration(top, table[top], own_us)
            print_burst(top, table[top])
            print_server_cpu(top, table[top])
        if args.save:
            meta = {"upstream": kind, "events": args.events, "rounds": args.rounds}
            if own_us is not None:
                meta["gateway_cpu_per_request_us"] = round(own_us, 1)
            meta |= {"cpu_wait_shares": {name: round(v, 4) for name, v in waits.items()}}
            save_rounds(args.save, table, meta | {"cpus": os.cpu_count()})
            print(f"rounds saved to {args.save} (report several runs as one: --pool)")
        if args.py_spy:
            name, child = next(iter(gateways.items()))
            _profile(
                urls[name],
                child.pid,
                levels[-1],
                body,
                args.events,
                args.py_spy,
                args.profile_seconds,
            )
    finally:
        for child in reversed(children):  # the proxies before their upstream
            child.terminate()
            child.wait(10)
        stack.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
