"""`python -m bench run|sweep …`; BenchError → one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.conditions import parse_overrides, split_args
from bench.errors import BenchError
from bench.options import add_common, parse_workloads
from bench.rundir import RunDir
from bench.scale import get_scale
from devtools.interrupt import run_interruptible

EXIT_OK = 0
EXIT_REQUEST_ERRORS = 1
EXIT_BAD_INPUT = 2


def _load_plan(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"--plan {path}: {exc}") from None
    return data


def add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run workloads against a running OpenAI-compatible server")
    p.add_argument("--url", required=True, help="vLLM base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--gateway-url", help="gateway base URL: agent loop runs through both")
    add_common(p)
    p.add_argument(
        "--api-key",
        default=os.environ.get("BENCH_API_KEY"),
        help="bearer key for --url [BENCH_API_KEY]",
    )
    p.add_argument(
        "--gateway-api-key",
        default=os.environ.get("BENCH_GATEWAY_API_KEY"),
        help="bearer key for --gateway-url [BENCH_GATEWAY_API_KEY]",
    )
    p.add_argument("--metrics-url", help="vLLM /metrics (default: URL/metrics)")
    p.add_argument("--max-model-len", type=int, help="when /v1/models does not say")
    p.add_argument("--plan", help="budget plan JSON (python -m budget plan --json) for conditions")
    p.add_argument("--vllm-args", help="the flags vLLM was started with, for conditions")
    p.add_argument(
        "--condition",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a condition given by hand (repeatable), e.g. graph_mode=NONE",
    )
    p.add_argument(
        "--server-state",
        default="auto",
        choices=("auto", "cold", "warm"),
        help="auto: cold when vLLM's counters show no request yet",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    add_run(sub)
    from bench.sweep_cli import add_sweep

    add_sweep(sub)
    return p


def cmd_run(args: argparse.Namespace) -> int:
    from bench.runner import RunOptions, run_benchmark

    opts = RunOptions(
        url=args.url,
        model=args.model,
        workloads=parse_workloads(args.workload),
        scale=get_scale(args.scale),
        seed=args.seed,
        run_dir=RunDir(args.out),
        gateway_url=args.gateway_url,
        api_key=args.api_key,
        gateway_api_key=args.gateway_api_key,
        metrics_url=args.metrics_url,
        plan=_load_plan(args.plan),
        vllm_args=tuple(split_args(args.vllm_args)),
        overrides=parse_overrides(args.condition),
        server_state=args.server_state,
        max_model_len=args.max_model_len,
        progress=not args.no_progress,
        plots=not args.no_plots,
    )
    summary = run_benchmark(opts)
    print(f"report: {opts.run_dir.report_path}")
    failed = sum(s["errors"] for s in summary["workloads"].values())
    return EXIT_REQUEST_ERRORS if failed else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_interruptible("bench", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "run":
            return cmd_run(args)
        from bench.sweep_cli import cmd_sweep

        return cmd_sweep(args)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
