"""The two things `python -m entrypoint` does: `dry_run` and `serve`.

Both detect the machine and build the plan; `serve` then runs pre-flight, opens
the control endpoint and hands over to the Supervisor (on a Ray head, once the
cluster is complete; a Ray worker only joins: see roles.py).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from budget.plan import Plan
from budget.render import render_table
from entrypoint import gdn
from entrypoint.config import EntrypointConfig
from entrypoint.console import Console
from entrypoint.control import ControlServer
from entrypoint.errors import EXIT_DOES_NOT_FIT, PreflightError
from entrypoint.flag_cache import FlagCache, argv_key, installed_build
from entrypoint.gateway_mode import EMBEDDED, check_embedded, check_key_in_config_file
from entrypoint.hardware import Machine, detect
from entrypoint.logscan import LogWatcher
from entrypoint.memory import read_memory
from entrypoint.metrics import build_registry
from entrypoint.node_check import check_node
from entrypoint.nvml import load_nvml, read_gpus
from entrypoint.planning import Launch, build_launch, make_plan, vllm_console_script
from entrypoint.preflight import after_load_eviction, check_model_dir, fit_problem, run_checks
from entrypoint.ray_cluster import interconnect_summary, ray_launch, unified_gpu
from entrypoint.roles import check_role, expected_cluster, for_head, run_head, run_worker
from entrypoint.signals import SignalFlag, StopRequested
from entrypoint.state import Lifecycle
from entrypoint.supervisor import Context, Supervisor
from entrypoint.vllm_flags import check_flag_names, check_flags, known_flags, vllm_parser
from entrypoint.vllm_version import PlannedVersion, installed_vllm_version, planned_version
from entrypoint.watchdog import floor_bytes, watchdog_line

CONTROL_HOST = "0.0.0.0"


@dataclass(frozen=True)
class Prepared:
    machine: Machine
    plan: Plan
    launch: Launch
    memory_floor_bytes: int = 0


def prepare(config: EntrypointConfig, console: Console) -> Prepared:
    """Machine → (model dir checked) → plan → command."""
    machine = detect(read_gpus(load_nvml()))
    console.say(f"machine: {machine.describe()}")
    check_model_dir(config.plan.model)
    vllm = planned_version(config.plan.vllm_version, installed_vllm_version())
    plan = make_plan(config, machine, vllm.version)
    console.say(rules_line(plan, vllm))
    check_role(config, plan)
    launch = build_launch(config, plan, vllm_console_script())
    floor = floor_bytes(config, plan, read_memory().total_bytes)
    console.say(watchdog_line(config, floor))
    launch = for_head(launch, config) if config.role == "head" else launch
    return Prepared(machine, plan, launch, floor)


def rules_line(plan: Plan, vllm: PlannedVersion) -> str:
    """Which vLLM the plan is for, from where, and which release's KV rules it applies."""
    chosen = plan.settings.vllm
    line = f"vLLM {chosen.version} ({vllm.source}): KV rules of vLLM {chosen.rules.name}"
    return f"{line}; {chosen.warning}" if chosen.warning else line


def dry_run(config: EntrypointConfig, console: Console) -> int:
    """Print the plan and the exact command; 1 when it does not fit (and not forced)."""
    if config.role != "single":
        uma = unified_gpu(detect(read_gpus(load_nvml())))
        console.raw(interconnect_summary(config))
        console.raw("ray command: " + ray_launch(config, os.environ, uma).shown())
    if config.role == "worker":
        return 0
    prepared = prepare(config, console)
    console.raw(render_table(prepared.plan))
    console.raw("")
    console.raw("entrypoint command (SPARKSERVE_* settings applied):")
    console.raw(prepared.launch.shown())
    if note := gdn.choose(prepared.plan, prepared.launch.extra_args, None).message:
        console.raw(note)
    problem = fit_problem(prepared.plan)
    if problem is None:
        return 0
    console.raw(f"\n{problem}")
    return 0 if config.force else EXIT_DOES_NOT_FIT


def with_gdn_backend(prepared: Prepared, known: Collection[str], console: Console) -> Prepared:
    """Add --gdn-prefill-backend triton where it saves a FlashInfer JIT (see gdn.py)."""
    choice = gdn.choose(prepared.plan, prepared.launch.extra_args, known)
    if choice.message:
        console.say(choice.message)
    return replace(prepared, launch=gdn.apply(prepared.launch, choice))


def _info(config: EntrypointConfig, prepared: Prepared, vllm_version: str) -> dict[str, str]:
    settings = prepared.plan.settings
    return {
        "model": prepared.plan.model_name,
        "hardware": settings.hardware.name,
        "device": settings.device,
        "served_model_name": config.plan.served_model_name or "",
        "vllm_version": vllm_version,
    }


def preflight(config: EntrypointConfig, console: Console) -> tuple[Prepared, str]:
    """Plan, checks and vLLM's own flag check: what to launch, and vLLM's version."""
    prepared = prepare(config, console)
    console.say("plan:\n" + render_table(prepared.plan))
    run_checks(config, prepared.plan, prepared.machine, console)
    check_key_in_config_file(config.vllm_extra_args)
    if config.gateway == EMBEDDED:
        check_embedded(config)
        console.say("embedded gateway: GATEWAY_* settings ok (docs/gateway.md)")
    return checked_flags(config, prepared, console, os.environ)


def checked_flags(
    config: EntrypointConfig, prepared: Prepared, console: Console, environ: Mapping[str, str]
) -> tuple[Prepared, str]:
    """vLLM's own flag check, its verdict read from the cache when vLLM and the
    arguments are those it accepted before (entrypoint/flag_cache.py)."""
    build = installed_build() if config.cache_dir is not None else None
    cache = FlagCache(config.cache_dir, build) if config.cache_dir and build else None
    cached = cache.load() if cache else None
    parsed = None
    if cached is None:
        parsed = vllm_parser()
        known: Collection[str] = known_flags(parsed[0])
    else:
        known = cached.known
    prepared = with_gdn_backend(prepared, known, console)
    launch = prepared.launch
    key = argv_key((*launch.planned_args, *launch.extra_args), {**environ, **launch.env})
    if cache and cached and key in cached.accepted:
        console.say(
            f"pre-flight ok: vLLM {cached.version} accepted these flags before "
            f"(verdict read from {cache.path})"
        )
        return prepared, cached.version
    if cached:  # an unknown flag is refused from the cached list, without vLLM
        check_flag_names(launch.planned_args, launch.extra_args, known, cached.version)
    parser, version = parsed or vllm_parser()
    check_flags(launch.planned_args, launch.extra_args, (parser, version))
    console.say(f"pre-flight ok: vLLM {version} knows every flag")
    if cache and (problem := cache.store(version, known_flags(parser), key)):
        console.say(f"warning: the flag check's verdict is not cached: {problem}")
    return prepared, version


def serve(config: EntrypointConfig, console: Console, environ: dict[str, str]) -> int:
    """Pre-flight, then launch and supervise vLLM (on a head: after Ray); the exit code."""
    check_node(config)
    signals = SignalFlag()
    signals.install()
    if config.role == "worker":
        machine = detect(read_gpus(load_nvml()))
        console.say(f"machine: {machine.describe()}")
        return run_worker(config, console, environ, signals, unified_gpu(machine))
    try:
        prepared, version = preflight(config, console)
        signals.check()
    except StopRequested as stop:
        return stop.exit_code
    if config.role == "head":
        return run_head(
            config,
            console,
            environ,
            signals,
            expected_cluster(prepared.plan),
            lambda: _supervise(config, console, environ, signals, prepared, version),
            unified_gpu(prepared.machine),
        )
    return _supervise(config, console, environ, signals, prepared, version)


def _supervise(
    config: EntrypointConfig,
    console: Console,
    environ: dict[str, str],
    signals: SignalFlag,
    prepared: Prepared,
    version: str,
) -> int:
    lifecycle, watcher = Lifecycle(), LogWatcher()
    nvml = load_nvml()
    registry = build_registry(
        prepared.plan,
        watcher,
        lifecycle,
        _info(config, prepared, version),
        read_gpus=lambda: read_gpus(nvml),
        read_host=read_memory,
        memory_floor_bytes=prepared.memory_floor_bytes,
    )
    try:
        control = ControlServer(CONTROL_HOST, config.control_port, lifecycle, registry)
    except OSError as exc:
        raise PreflightError(
            f"SPARKSERVE_CONTROL_PORT={config.control_port}: cannot listen: {exc.strerror}"
        ) from None
    control.start()
    console.say(f"control endpoint on :{control.port} (/ready, /metrics)")
    try:
        ctx = Context(
            config=config,
            plan=prepared.plan,
            launch=prepared.launch,
            console=console,
            lifecycle=lifecycle,
            watcher=watcher,
            signals=signals,
            environ=environ,
            after_load=after_load_eviction(config, prepared.plan, console),
            memory_floor_bytes=prepared.memory_floor_bytes,
        )
        return Supervisor(ctx).run()
    finally:
        control.close()
