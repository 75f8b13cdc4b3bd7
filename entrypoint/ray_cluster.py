"""Ray on a cluster node: the `ray start` command of each role, and the head's wait for nodes.

`ray start … --block` runs as a supervised child in its own process group (like
vLLM), so stopping it stops GCS, raylet and agents together. The head polls the
cluster through `python -m entrypoint.ray_probe` (a separate process: the
entrypoint never imports Ray) until the expected nodes and GPUs are alive.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from budget.units import GiB
from entrypoint.config import EntrypointConfig
from entrypoint.console import Console
from entrypoint.errors import ConfigError, PreflightError, RayError
from entrypoint.hardware import Machine
from entrypoint.planning import Launch, interconnect_env
from entrypoint.vllm_flags import flag_name

PROBE_TIMEOUT_SECONDS = 20.0  # ray.init retries an unreachable GCS for minutes
WAIT_POLL_SECONDS = 2.0
PROGRESS_EVERY_SECONDS = 30.0
LOCAL_HEAD = "127.0.0.1"
# Ray ≥ 2.5x drains a node for up to this many seconds (default 30) when `ray start
# --block` gets SIGTERM, for Ray Serve replicas to move away. Nothing of ours runs on
# Ray once the entrypoint stops it (vLLM is stopped first on the head; a worker only
# hosts vLLM's workers), and a drain as long as the grace period ends in SIGKILL
# (seen on the H200 run: the raylet never went idle). So it is off unless set.
RAY_DRAIN_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"
# Ray's memory monitor kills a task or actor process once the node's used memory passes
# RAY_memory_usage_threshold (0.95). On unified memory vLLM's GPU allocations are
# the node's memory, so a KV pool sized to the plan reads as a node about to run out and
# vLLM's own workers are killed; 0 turns the monitor off (Ray's docs, "Out-Of-Memory
# Prevention"). Memory is guarded by the plan and the kernel there, not by Ray.
RAY_MEMORY_MONITOR_ENV = "RAY_memory_monitor_refresh_ms"
# Ray's object store defaults to 30 % of the node's memory, capped by /dev/shm's free
# space (ray/_private/utils.py resolve_object_store_memory): ≈ 35 GB on a Spark, taken
# from the same memory as the KV pool as objects arrive. vLLM's Ray executor passes
# only control messages and its compiled graph's 1 MB channel buffers through it
# (ray/dag/context.py; tensors travel over NCCL), so on unified memory it is capped at
# 1 GiB, which lies within the headroom the plan leaves to the system.
UMA_OBJECT_STORE_BYTES = GiB
NODE_IP_FLAG = "--node-ip-address"
OBJECT_STORE_FLAG = "--object-store-memory"


@dataclass(frozen=True)
class Expected:
    nodes: int
    gpus: int


@dataclass(frozen=True)
class Node:
    address: str
    gpus: float


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[Node, ...]

    @property
    def gpus(self) -> float:
        return sum(node.gpus for node in self.nodes)

    def describe(self) -> str:
        joined = ", ".join(f"{n.address} ({n.gpus:g} GPU)" for n in self.nodes) or "none"
        return f"{len(self.nodes)} node(s), {self.gpus:g} GPU(s): {joined}"


def ray_executable() -> str:
    """The `ray` next to this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise PreflightError(
            "SPARKSERVE_ROLE needs Ray, which is not installed here (pip install ray)"
        )
    return found


def head_address(config: EntrypointConfig) -> str:
    """Where the worker joins: SPARKSERVE_HEAD_ADDRESS, with SPARKSERVE_RAY_PORT unless given."""
    address = config.head_address or LOCAL_HEAD
    return address if ":" in address else f"{address}:{config.ray_port}"


def unified_gpu(machine: Machine) -> bool:
    """A GPU that shares the host's memory (GB10): Ray's memory view does not hold there."""
    return machine.device == "cuda" and machine.uma


def _given(args: tuple[str, ...], flag: str) -> bool:
    return any(flag_name(word) == flag for word in args)


def node_args(config: EntrypointConfig, uma: bool) -> tuple[str, ...]:
    """--node-ip-address and --object-store-memory, unless SPARKSERVE_RAY_EXTRA_ARGS has them."""
    extra = config.ray_extra_args
    args: tuple[str, ...] = ()
    if config.node_ip:
        if _given(extra, NODE_IP_FLAG):
            raise ConfigError(
                f"SPARKSERVE_NODE_IP={config.node_ip} and {NODE_IP_FLAG} in "
                "SPARKSERVE_RAY_EXTRA_ARGS: give the address once, in SPARKSERVE_NODE_IP"
            )
        args += (NODE_IP_FLAG, config.node_ip)
    store = config.ray_object_store_memory or (UMA_OBJECT_STORE_BYTES if uma else None)
    if store is not None and not _given(extra, OBJECT_STORE_FLAG):
        args += (OBJECT_STORE_FLAG, str(store))
    return args


def ray_env(config: EntrypointConfig, environ: Mapping[str, str], uma: bool) -> dict[str, str]:
    """Ray's environment: the link, and our defaults for what the user did not set."""
    env = {"RAY_USAGE_STATS_ENABLED": "0", **interconnect_env(config)}
    if RAY_DRAIN_ENV not in environ:
        env[RAY_DRAIN_ENV] = "0"
    if uma and RAY_MEMORY_MONITOR_ENV not in environ:
        env[RAY_MEMORY_MONITOR_ENV] = "0"
    return env


def ray_launch(
    config: EntrypointConfig, environ: Mapping[str, str] | None = None, uma: bool = False
) -> Launch:
    """`ray start` for this node's role, in the foreground (--block). `environ` is the
    environment it will inherit: a drain timeout or memory monitor set there is kept.
    `uma`: this node's GPU shares its memory (see unified_gpu)."""
    if config.role == "head":
        role_args: tuple[str, ...] = ("--head", "--port", str(config.ray_port))
    else:
        role_args = ("--address", head_address(config))
    return Launch(
        prefix=(ray_executable(), "start"),
        planned_args=(*role_args, *node_args(config, uma), "--block"),
        extra_args=config.ray_extra_args,
        env=ray_env(config, environ or {}, uma),
    )


def drain_outlasts_grace(config: EntrypointConfig, environ: Mapping[str, str]) -> str | None:
    """A warning when a drain timeout set by the user is not shorter than the grace period."""
    value = environ.get(RAY_DRAIN_ENV)
    if value is None:
        return None
    try:
        drain = float(value)
    except ValueError:
        return f"{RAY_DRAIN_ENV}={value!r} is not a number; Ray falls back to its default (30 s)"
    if drain > 0 and drain >= config.stop_grace_seconds:
        return (
            f"{RAY_DRAIN_ENV}={value} s is not shorter than SPARKSERVE_STOP_GRACE_SECONDS="
            f"{config.stop_grace_seconds:g}: on stop, Ray will still be draining when it is "
            "SIGKILLed (unset it, or raise the grace period above it)"
        )
    return None


def interconnect_summary(config: EntrypointConfig, expected: Expected | None = None) -> str:
    env = interconnect_env(config)
    lines = [
        f"role {config.role}: Ray GCS port {config.ray_port}"
        + (f", joining {head_address(config)}" if config.role == "worker" else ""),
        "  NCCL_SOCKET_IFNAME=" + env.get("NCCL_SOCKET_IFNAME", "unset (NCCL chooses)"),
        "  GLOO_SOCKET_IFNAME=" + env.get("GLOO_SOCKET_IFNAME", "unset (Gloo chooses)"),
        "  NCCL_IB_HCA=" + env.get("NCCL_IB_HCA", "unset (NCCL uses every RDMA device)"),
        "  NCCL_IB_GID_INDEX=" + env.get("NCCL_IB_GID_INDEX", "unset (NCCL chooses)"),
        "  this node's address (VLLM_HOST_IP, --node-ip-address): "
        + env.get("VLLM_HOST_IP", "unset (Ray and vLLM guess)"),
        "  ray start extra args: " + (" ".join(config.ray_extra_args) or "none"),
    ]
    if expected is not None:
        lines.append(
            f"  waiting for {expected.nodes} node(s) and {expected.gpus} GPU(s), "
            f"up to {config.node_wait_timeout:g} s (SPARKSERVE_NODE_WAIT_TIMEOUT)"
        )
    return "\n".join(lines)


def probe_cluster(address: str) -> ClusterView | str:
    """The alive nodes, or why they could not be read (Ray not up yet, say)."""
    command = [sys.executable, "-m", "entrypoint.ray_probe", address]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        return f"no answer from Ray at {address} within {PROBE_TIMEOUT_SECONDS:g} s"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[-1] if lines else f"probe exit code {done.returncode}"
    nodes = json.loads(done.stdout.strip().splitlines()[-1])
    return ClusterView(tuple(Node(str(n["address"]), float(n["gpus"])) for n in nodes))


def missing(view: ClusterView, expected: Expected) -> str | None:
    """What has not joined yet ("1 of 2 node(s) and 1 of 2 GPU(s)"), or None."""
    gaps = []
    if len(view.nodes) < expected.nodes:
        gaps.append(f"{expected.nodes - len(view.nodes)} of {expected.nodes} node(s)")
    if view.gpus < expected.gpus:
        gaps.append(f"{expected.gpus - view.gpus:g} of {expected.gpus} GPU(s)")
    return " and ".join(gaps) or None


def wait_for_cluster(
    probe: Callable[[], ClusterView | str],
    expected: Expected,
    timeout_seconds: float,
    console: Console,
    pause: Callable[[float], None],
) -> ClusterView:
    """Poll until every expected node and GPU is alive; RayError naming what is missing."""
    started = time.monotonic()
    shown, shown_at = "", started
    view = ClusterView(())
    while True:
        seen = probe()
        view = seen if isinstance(seen, ClusterView) else view
        gap = missing(view, expected)
        state = f"{view.describe()}; missing {gap}" if gap else f"{view.describe()}: all joined"
        state = state if isinstance(seen, ClusterView) else f"{state} (Ray: {seen})"
        elapsed = time.monotonic() - started
        if state != shown or time.monotonic() - shown_at >= PROGRESS_EVERY_SECONDS:
            console.say(f"cluster after {elapsed:.0f} s: {state}")
            shown, shown_at = state, time.monotonic()
        if gap is None:
            return view
        if elapsed >= timeout_seconds:
            raise RayError(
                f"after {timeout_seconds:g} s (SPARKSERVE_NODE_WAIT_TIMEOUT) {gap} are missing "
                f"({view.describe()}): start SPARKSERVE_ROLE=worker on each other node with "
                "SPARKSERVE_HEAD_ADDRESS=<this node> and the same SPARKSERVE_RAY_PORT"
            )
        pause(WAIT_POLL_SECONDS)
