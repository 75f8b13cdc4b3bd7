"""`python -m bench sweep`: restart vLLM through the entrypoint for each setting."""

from __future__ import annotations

import argparse
import os
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.conditions import split_args
from bench.errors import BenchError
from bench.launcher import DEFAULT_LAUNCHER, LaunchedServer, LaunchSpec
from bench.options import add_common, parse_workloads
from bench.planinfo import plan_for
from bench.rundir import RunDir
from bench.scale import get_scale
from bench.sweep import STAGES, Stage, metrics_row, run_sweep
from bench.sweep_report import write_sweep_report
from budget.vllm_rules import CUDAGRAPH_METRICS_FIRST, has_cudagraph_metrics_flag
from entrypoint.graph_hits import coverage, graph_hits, parse_log
from entrypoint.graph_stats import GraphStats, parse_graph_stats
from entrypoint.vllm_version import installed_vllm_version, planned_version

ERROR_CHARS = 2000
GRAPH_STATS_FLAG = "--cudagraph-metrics"
EXTRA_ARGS_ENV = "SPARKSERVE_VLLM_EXTRA_ARGS"
GRAPH_STATS_STAGE = "mtp"  # step 2 (graph coverage) runs with step 1's settings
# vllm/envs.py VLLM_LOG_STATS_INTERVAL: vLLM prints its stats every 10 s by default; the
# last busy interval is printed at the next tick, so the harness waits one more.
DEFAULT_LOG_STATS_INTERVAL_S = 10.0
LOG_FLUSH_MARGIN_S = 2.0


def _values(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BenchError(f"--values {text!r}; expected integers such as 0,1,2,3") from None


def add_sweep(sub: Any) -> None:
    p = sub.add_parser("sweep", help="restart vLLM through the entrypoint for each setting")
    p.add_argument(
        "--param",
        action="append",
        required=True,
        choices=tuple(STAGES),
        help="parameter to sweep (repeatable; run in the tuning article's order)",
    )
    p.add_argument(
        "--values",
        action="append",
        required=True,
        type=_values,
        help="comma list for the matching --param, e.g. 0,1,2,3",
    )
    add_common(p)
    p.set_defaults(workload=None)
    p.add_argument("--serve-model", required=True, help="SPARKSERVE_MODEL: profile or directory")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="SPARKSERVE_X=V",
        help="fixed entrypoint setting for every run (repeatable)",
    )
    p.add_argument(
        "--launcher",
        default=shlex.join(DEFAULT_LAUNCHER),
        help="command that starts the server (default: python -m entrypoint)",
    )
    p.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds to /ready")
    p.add_argument("--retry-failed", action="store_true", help="rerun settings that failed")


def base_env(args: argparse.Namespace) -> dict[str, str]:
    env = {"SPARKSERVE_MODEL": args.serve_model}
    if args.model:
        env["SPARKSERVE_SERVED_MODEL_NAME"] = args.model
    for pair in args.env:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("SPARKSERVE_"):
            raise BenchError(f"--env {pair!r}; expected SPARKSERVE_NAME=value")
        env[key] = value
    return env


def setting_env(
    base: Mapping[str, str], stage: Stage, value: int, fixed: Mapping[str, int]
) -> dict[str, str]:
    env = dict(base)
    env.update({STAGES[p].env: str(v) for p, v in fixed.items()})
    env[stage.env] = str(value)
    return env


def with_graph_stats(
    stage: Stage, env: Mapping[str, str], installed: tuple[str, str] | None
) -> tuple[dict[str, str], str | None]:
    """Step 2's launch env with vLLM's `--cudagraph-metrics` added, and None; or the env
    unchanged and why the flag is not passed (another stage, or a vLLM without it).

    The version is the one the entrypoint plans for: SPARKSERVE_VLLM_VERSION, else the
    vLLM installed here (entrypoint/vllm_version.py)."""
    if stage.param != GRAPH_STATS_STAGE:
        return dict(env), f"not asked for in stage {stage.param}"
    version = planned_version(env.get("SPARKSERVE_VLLM_VERSION"), installed).version
    if version is None:
        return dict(env), f"vLLM version unknown here: {GRAPH_STATS_FLAG} not passed"
    first = ".".join(str(part) for part in CUDAGRAPH_METRICS_FIRST)
    if not has_cudagraph_metrics_flag(version):
        return dict(env), f"vLLM {version} is older than {first}: {GRAPH_STATS_FLAG} not passed"
    extra = split_args(env.get(EXTRA_ARGS_ENV))
    if GRAPH_STATS_FLAG not in extra:
        extra.append(GRAPH_STATS_FLAG)
    return {**env, EXTRA_ARGS_ENV: shlex.join(extra)}, None


def log_flush_wait_s(env: Mapping[str, str]) -> float:
    interval = env.get("VLLM_LOG_STATS_INTERVAL", "").strip()
    return (float(interval) if interval else DEFAULT_LOG_STATS_INTERVAL_S) + LOG_FLUSH_MARGIN_S


def reported_graph_stats(text: str, why_not: str | None) -> tuple[GraphStats | None, str | None]:
    """vLLM's stats in the log written during the run, or None and why there are none."""
    if why_not is not None:
        return None, why_not
    stats = parse_graph_stats(text)
    if stats is None:
        return None, f"{GRAPH_STATS_FLAG} was passed but vLLM printed no CUDA-graph stats"
    return stats, None


class SettingRunner:
    """Runs one setting: launch, bench, stop; returns the state entry."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base = base_env(args)
        self.command = shlex.split(args.launcher)

    def __call__(
        self, stage: Stage, value: int, fixed: Mapping[str, int], out: Path
    ) -> dict[str, Any]:
        from bench.runner import RunOptions, run_benchmark

        env, no_stats = with_graph_stats(
            stage, setting_env(self.base, stage, value, fixed), installed_vllm_version()
        )
        plan, plan_error = plan_for({**os.environ, **env})
        spec = LaunchSpec(self.command, env, out / "server.log", self.args.ready_timeout)
        try:
            with LaunchedServer(spec):
                start_log = spec.log_path.read_text(errors="replace")
                logged = parse_log(start_log)
                extra = split_args(env.get("SPARKSERVE_VLLM_EXTRA_ARGS"))
                opts = RunOptions(
                    url=spec.url,
                    model=self.args.model,
                    workloads=parse_workloads(self.args.workload)
                    if self.args.workload
                    else stage.workloads,
                    scale=get_scale(self.args.scale),
                    seed=self.args.seed,
                    run_dir=RunDir(out),
                    plan=plan,
                    vllm_args=tuple((plan or {}).get("vllm_args", [])) + tuple(extra),
                    overrides={
                        k: v
                        for k, v in (("vllm_kv_tokens", logged["kv_cache_tokens"]),)
                        if v is not None
                    },
                    progress=not self.args.no_progress,
                    plots=not self.args.no_plots,
                    label=f"{stage.param}={value}",
                )
                summary = run_benchmark(opts)
                if no_stats is None:
                    time.sleep(log_flush_wait_s({**os.environ, **env}))
                run_log = spec.log_path.read_text(errors="replace")[len(start_log) :]
        except BenchError as exc:  # launch failed, or the server broke during the run
            return {"status": "failed", "error": str(exc)[:ERROR_CHARS], "plan_error": plan_error}
        step2 = stage.param == GRAPH_STATS_STAGE
        reported = reported_graph_stats(run_log, no_stats) if step2 else None
        row = self._row(value, summary, logged, reported)
        return {"status": "ok", "row": row, "run_dir": str(out)}

    @staticmethod
    def _row(
        value: int,
        summary: Mapping[str, Any],
        logged: Mapping[str, Any],
        reported: tuple[GraphStats | None, str | None] | None,
    ) -> dict[str, Any]:
        conds = summary["conditions"]
        graph_mode = logged["graph_mode"] or conds.get("graph_mode")
        sizes = logged["capture_sizes"] or conds.get("capture_sizes")
        graphs = coverage(
            int(conds.get("mtp_k") or 0), int(conds.get("max_num_seqs") or 1), graph_mode, sizes
        )
        row = {
            **metrics_row(value, summary),
            "plan_kv_tokens": conds.get("plan_kv_tokens"),
            "vllm_kv_tokens": logged["kv_cache_tokens"],
            "graph_mode": graph_mode,
            "graph_fallback_widths": graphs["fallback"],
            "graph_padded_widths": [f"{w}→{p}" for w, p in graphs["padded"].items()],
            "graph_note": graphs["note"],
        }
        if reported is not None:
            hits = graph_hits(graphs, *reported)
            row["graph_hits"] = hits
            row["graph_full_widths"] = hits.get("full")
            row["graph_reported_fallback_widths"] = hits.get("fell_back")
        return row


def cmd_sweep(args: argparse.Namespace) -> int:
    if len(args.param) != len(args.values):
        raise BenchError(
            f"{len(args.param)} --param but {len(args.values)} --values; give one each"
        )
    params = list(zip(args.param, args.values, strict=True))
    identity = {
        "params": [[p, v] for p, v in params],
        "serve_model": args.serve_model,
        "model": args.model,
        "env": sorted(args.env),
        "scale": args.scale,
        "seed": args.seed,
        "workload": args.workload,
    }
    result = run_sweep(args.out, params, identity, SettingRunner(args), args.retry_failed)
    report = write_sweep_report(result, args.out, plots=not args.no_plots)
    print(f"sweep report: {report}")
    failed = any(stage["failed"] for stage in result["stages"])
    return 1 if failed else 0
