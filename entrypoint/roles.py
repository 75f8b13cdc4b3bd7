"""The cluster roles: `head` and `worker` around the usual single-node serve.

head:   ray start --head (supervised) → wait for every node and GPU → the usual
        launch, warm-up and supervision of vLLM (Ray executor) → Ray stopped on exit.
worker: ray start --address HEAD:PORT (supervised, foreground) until a signal
        (exit 0) or until Ray exits, e.g. because the head went away (exit 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from budget.plan import Plan
from entrypoint.child import VLLMChild, describe_returncode
from entrypoint.config import EntrypointConfig
from entrypoint.console import Console
from entrypoint.errors import PreflightError, RayError
from entrypoint.logscan import LogWatcher
from entrypoint.planning import Launch
from entrypoint.priority import lower_and_say
from entrypoint.ray_cluster import (
    LOCAL_HEAD,
    Expected,
    drain_outlasts_grace,
    interconnect_summary,
    probe_cluster,
    ray_launch,
    wait_for_cluster,
)
from entrypoint.signals import SignalFlag, StopRequested

TICK_SECONDS = 0.5
LAST_LINES = 30
RAY_BACKEND = ("--distributed-executor-backend", "ray")


def expected_cluster(plan: Plan) -> Expected:
    """Every node of the plan, and on cuda every GPU of each, at least one per rank.

    vLLM's Ray executor asks for a placement group of one GPU per rank (TP × PP);
    a one-node plan on a one-GPU profile (h200) with TP 2 still needs two GPUs in
    Ray, or vLLM waits for a placement group that never comes.
    """
    s = plan.settings
    gpus = max(s.nodes * s.hardware.gpus, s.tp * s.pp) if s.device == "cuda" else 0
    return Expected(s.nodes, gpus)


def check_role(config: EntrypointConfig, plan: Plan) -> None:
    if plan.settings.nodes > 1 and config.role != "head":
        raise PreflightError(
            f"the plan spans {plan.settings.nodes} nodes (hardware {plan.settings.hardware.name}): "
            "set SPARKSERVE_ROLE=head here and SPARKSERVE_ROLE=worker on the other nodes"
        )


def for_head(launch: Launch, config: EntrypointConfig) -> Launch:
    """vLLM on the head: Ray executor (even on one node) on this node's Ray."""
    words = (*launch.planned_args, *launch.extra_args)
    backend = () if "--distributed-executor-backend" in words else RAY_BACKEND
    return replace(
        launch,
        planned_args=(*launch.planned_args, *backend),
        env={**launch.env, "RAY_ADDRESS": f"{LOCAL_HEAD}:{config.ray_port}"},
    )


def start_ray(
    config: EntrypointConfig, console: Console, environ: dict[str, str], uma: bool
) -> VLLMChild:
    launch = ray_launch(config, environ, uma)
    warning = drain_outlasts_grace(config, environ)
    if warning is not None:
        console.say("warning: " + warning)
    console.say(f"starting Ray: {launch.shown()}")
    try:
        node = VLLMChild(launch, console, LogWatcher(), environ, console.ray, "Ray")
    except OSError as exc:
        raise RayError(f"could not start Ray ({launch.argv[0]}): {exc}") from None
    console.say(f"Ray pid {node.pid} (own process group)")
    # Under Ray the model runs in the raylet's workers, which inherit this.
    lower_and_say(node.pid, config.vllm_nice, "Ray", console.say)
    return node


def ray_exited(node: VLLMChild, console: Console, why: str) -> RayError:
    code = node.proc.wait()
    node.kill_group()
    console.say(f"Ray exited ({describe_returncode(code)}); its last lines:")
    for line in node.tail(LAST_LINES):
        console.say("  | " + line)
    return RayError(f"Ray exited ({describe_returncode(code)}): {why}")


def watched_pause(
    node: VLLMChild, signals: SignalFlag, console: Console
) -> Callable[[float], None]:
    """A wait that ends early on a signal (StopRequested) or Ray's exit (RayError)."""

    def pause(seconds: float) -> None:
        signals.wait(seconds)
        if node.poll() is not None:
            raise ray_exited(node, console, "the head's Ray stopped before the cluster was ready")

    return pause


def stop_ray(node: VLLMChild, config: EntrypointConfig, console: Console) -> None:
    grace = config.stop_grace_seconds
    console.say(f"stopping Ray (SIGTERM, SIGKILL after {grace:g} s)")
    code = node.stop(grace)
    console.say(f"Ray stopped ({describe_returncode(code)})")


def run_head(
    config: EntrypointConfig,
    console: Console,
    environ: dict[str, str],
    signals: SignalFlag,
    expected: Expected,
    serve_vllm: Callable[[], int],
    uma: bool = False,
) -> int:
    """Ray head up → cluster complete → `serve_vllm()`; Ray stopped whatever happens."""
    console.say(interconnect_summary(config, expected))
    node = start_ray(config, console, environ, uma)
    try:
        wait_for_cluster(
            lambda: probe_cluster(f"{LOCAL_HEAD}:{config.ray_port}"),
            expected,
            config.node_wait_timeout,
            console,
            watched_pause(node, signals, console),
        )
        return serve_vllm()
    except StopRequested as stop:
        return stop.exit_code
    finally:
        stop_ray(node, config, console)


def run_worker(
    config: EntrypointConfig,
    console: Console,
    environ: dict[str, str],
    signals: SignalFlag,
    uma: bool = False,
) -> int:
    """Join the head and stay until a signal (0) or until Ray exits (RayError, exit 3)."""
    console.say(interconnect_summary(config))
    node = start_ray(config, console, environ, uma)
    try:
        while node.poll() is None:
            signals.wait(TICK_SECONDS)
        raise ray_exited(node, console, "the head went away or refused this node")
    except StopRequested as stop:
        console.say(f"received {stop}")
        stop_ray(node, config, console)
        return stop.exit_code
    finally:
        node.kill_group()
