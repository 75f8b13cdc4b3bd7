"""`bench run`: conditions, counters before/after each workload, records, summary, report."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from tqdm import tqdm  # type: ignore[import-untyped]

from bench import agent_loop, conditions, long_context, mixed, short_chat
from bench.client import ChatClient, Clock, Target, http_client
from bench.counters import Snapshot, delta, derived, is_server_cold
from bench.errors import BenchError
from bench.records import RequestRecord
from bench.report import render_run
from bench.rundir import RunDir, write_record
from bench.scale import Scale
from bench.server import ServerInfo, server_info, settled_scrape
from bench.workloads import Context

Summarize = Callable[[Sequence[RequestRecord]], dict[str, Any]]


@dataclass(frozen=True)
class Workload:
    name: str
    run: Callable[[Context], Awaitable[list[RequestRecord]]]
    summarize: Summarize
    planned: Callable[[Scale, int], int]
    all_targets: bool = False


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            short_chat.NAME,
            short_chat.run,
            short_chat.summarize,
            lambda s, _t: short_chat.planned_requests(s),
        ),
        Workload(
            agent_loop.NAME,
            agent_loop.run,
            agent_loop.summarize,
            agent_loop.planned_requests,
            all_targets=True,
        ),
        Workload(mixed.NAME, mixed.run, mixed.summarize, lambda s, _t: mixed.planned_requests(s)),
        Workload(
            long_context.NAME,
            long_context.run,
            long_context.summarize,
            lambda s, _t: long_context.planned_requests(s),
        ),
    )
}
DEFAULT_SUITE = tuple(WORKLOADS)


@dataclass(frozen=True)
class RunOptions:
    url: str
    model: str | None
    workloads: tuple[str, ...]
    scale: Scale
    seed: int
    run_dir: RunDir
    gateway_url: str | None = None
    api_key: str | None = None
    gateway_api_key: str | None = None
    metrics_url: str | None = None
    plan: Mapping[str, Any] | None = None
    vllm_args: tuple[str, ...] = ()
    overrides: Mapping[str, Any] = field(default_factory=dict)
    server_state: str = "auto"
    max_model_len: int | None = None
    progress: bool = True
    label: str | None = None
    plots: bool = True  # False: no PNGs, and no matplotlib needed (a bare GPU host)

    def targets(self) -> tuple[Target, ...]:
        direct = Target("direct", self.url.rstrip("/"), self.api_key)
        if self.gateway_url is None:
            return (direct,)
        return (direct, Target("gateway", self.gateway_url.rstrip("/"), self.gateway_api_key))


def check_workloads(names: Sequence[str]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        raise BenchError(f"workload={','.join(unknown)!r}; allowed: {', '.join(WORKLOADS)}")
    return tuple(names)


def counter_checks(records: Sequence[RequestRecord], counters: Mapping[str, Any]) -> dict[str, Any]:
    """Client-side usage totals next to vLLM's counter deltas over the same interval."""
    sums = {
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "generation_tokens": sum(r.completion_tokens for r in records),
        "cached_prompt_tokens": sum(r.cached_tokens or 0 for r in records),
    }
    return {
        key: {"client": client, "vllm": counters.get(key), "match": counters.get(key) == client}
        for key, client in sums.items()
    }


def state_of(option: str, before: Snapshot | None) -> str:
    if option != "auto":
        return option
    if before is None:
        return "unknown"
    return "cold" if is_server_cold(before) else "warm"


def run_conditions(opts: RunOptions, info: ServerInfo, before: Snapshot | None) -> dict[str, Any]:
    server = {"vllm_version": info.version, "max_model_len": info.max_model_len}
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("server", {k: v for k, v in server.items() if v is not None}),
        ("cache_config_info", conditions.from_cache_info(before.info if before else {})),
        ("counters", {"server_state": state_of("auto", before)}),
        ("plan", conditions.from_plan(opts.plan or {})),
        ("vllm_args", conditions.from_vllm_args(opts.vllm_args)),
        (
            "given",
            {
                **opts.overrides,
                **({} if opts.server_state == "auto" else {"server_state": opts.server_state}),
            },
        ),
    ]
    return conditions.merge(layers)


class _Sink:
    def __init__(self, run_dir: RunDir, bar: Any) -> None:
        self._stream = run_dir.open_records()
        self._bar = bar

    def __call__(self, record: RequestRecord) -> None:
        write_record(self._stream, record)
        self._bar.update(1)
        if record.error:
            self._bar.write(f"request failed: {record.error}")

    def close(self) -> None:
        self._stream.close()
        self._bar.close()


async def _measure(
    ctx: Context, workload: Workload, http: httpx.AsyncClient, metrics_url: str | None
) -> dict[str, Any]:
    before = await settled_scrape(http, metrics_url)
    started = time.perf_counter()
    records = await workload.run(ctx)
    duration = time.perf_counter() - started
    after = await settled_scrape(http, metrics_url)
    section: dict[str, Any] = {
        "requests": len(records),
        "errors": sum(1 for r in records if not r.ok),
        "duration_s": duration,
        "summary": workload.summarize(records),
    }
    if before is not None and after is not None:
        deltas = delta(before, after)
        section["counters"] = derived(deltas)
        section["counter_deltas"] = deltas
        section["checks"] = counter_checks(records, section["counters"])
    return section


async def _run(opts: RunOptions) -> dict[str, Any]:
    targets = opts.targets()
    metrics_url = opts.metrics_url or f"{targets[0].url}/metrics"
    clock = Clock()
    salt = f"bench-{opts.seed}-{uuid.uuid4().hex[:12]}"
    async with http_client() as http:
        info, model = await server_info(http, targets[0], opts.model)
        before = await settled_scrape(http, metrics_url)
        max_len = opts.max_model_len or info.max_model_len
        if max_len is None:
            raise BenchError(
                f"{targets[0].url}/v1/models gives no max_model_len for "
                f"{model!r} (models: {list(info.model_ids)}); pass --max-model-len"
            )
        planned = sum(WORKLOADS[n].planned(opts.scale, len(targets)) for n in opts.workloads)
        bar = tqdm(total=planned, unit="req", desc="bench", disable=not opts.progress)
        sink = _Sink(opts.run_dir, bar)
        clients = tuple(ChatClient(http, t, model, clock, salt) for t in targets)
        ctx = Context(http, clients, model, opts.scale, opts.seed, max_len, sink)
        try:
            sections = {}
            for name in opts.workloads:
                bar.set_description(name)
                sections[name] = await _measure(ctx, WORKLOADS[name], http, metrics_url)
        finally:
            sink.close()
        return {
            "label": opts.label,
            "options": {
                "url": opts.url,
                "gateway_url": opts.gateway_url,
                "model": model,
                "workloads": list(opts.workloads),
                "scale": opts.scale.name,
                "seed": opts.seed,
                "metrics_url": metrics_url,
            },
            "conditions": run_conditions(opts, info, before),
            "workloads": sections,
        }


def run_benchmark(opts: RunOptions) -> dict[str, Any]:
    """Run the workloads, write records/summary/report/plots; return the summary."""
    opts.run_dir.create()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    summary = asyncio.run(_run(opts))
    summary = {"started_at": started_at, **summary}
    opts.run_dir.write_summary(summary)
    records = opts.run_dir.read_records()
    plots: list[str] = []
    if opts.plots:
        from bench.plots import plot_run  # matplotlib is optional: only when writing plots

        plots = plot_run(summary, records, opts.run_dir.plots)
    opts.run_dir.report_path.write_text(render_run(summary, plots), encoding="utf-8")
    return summary
