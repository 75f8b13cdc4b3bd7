"""The entrypoint's control endpoint (`/ready`, `/metrics`) beside a vLLM the tests started.

The shared test vLLM is launched directly (tests/conftest.py), not by `python -m
entrypoint`, so this wires the entrypoint's own pieces the way `entrypoint.serve`
does: the plan for the same flags, a LogWatcher fed vLLM's real log, the real
collectors and ControlServer.  Only the lifecycle is set by hand (ready).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from prometheus_client import CollectorRegistry

from entrypoint.config import load_config
from entrypoint.control import ControlServer
from entrypoint.hardware import detect, host_memory
from entrypoint.logscan import LogWatcher
from entrypoint.metrics import build_registry
from entrypoint.nvml import GpuReading, load_nvml, read_gpus
from entrypoint.planning import make_plan
from entrypoint.state import READY, Lifecycle
from tests.vllm_proc import VLLMServer

# vLLM flags of the test server → the entrypoint settings that plan the same server.
FLAG_SETTINGS = {
    "--served-model-name": "SPARKSERVE_SERVED_MODEL_NAME",
    "--max-model-len": "SPARKSERVE_MAX_MODEL_LEN",
    "--max-num-seqs": "SPARKSERVE_MAX_NUM_SEQS",
    "--max-num-batched-tokens": "SPARKSERVE_MAX_NUM_BATCHED_TOKENS",
    "--kv-cache-memory-bytes": "SPARKSERVE_KV_CACHE_MEMORY_BYTES",
}
GpuReader = Callable[[], list[GpuReading]]


def entrypoint_env(server: VLLMServer, args: Sequence[str]) -> dict[str, str]:
    env = {"SPARKSERVE_MODEL": str(server.model_dir), "SPARKSERVE_DEVICE": "cpu"}
    for flag, value in itertools.pairwise(args):
        if flag in FLAG_SETTINGS:
            env[FLAG_SETTINGS[flag]] = value
    return env


def nvml_gpus() -> GpuReader:
    nvml = load_nvml()
    return lambda: read_gpus(nvml)


def control_registry(
    server: VLLMServer, args: Sequence[str], gpus: GpuReader, lifecycle: Lifecycle
) -> CollectorRegistry:
    config = load_config(entrypoint_env(server, args))
    plan = make_plan(config, detect([]))  # the test vLLM runs on CPU, GPU or not
    watcher = LogWatcher()
    for line in server.log_text().splitlines():
        watcher.feed(line)
    lifecycle.update(phase=READY, vllm_up=True)
    info = {
        "model": plan.model_name,
        "device": "cpu",
        "served_model_name": config.plan.served_model_name or "",
    }
    return build_registry(plan, watcher, lifecycle, info, read_gpus=gpus, read_host=host_memory)


@contextmanager
def control_endpoint(server: VLLMServer, args: Sequence[str]) -> Iterator[str]:
    """Yield the base URL of a control endpoint for `server` (real NVML, if any)."""
    lifecycle = Lifecycle()
    registry = control_registry(server, args, nvml_gpus(), lifecycle)
    control = ControlServer("127.0.0.1", 0, lifecycle, registry)
    control.start()
    try:
        yield f"http://127.0.0.1:{control.port}"
    finally:
        control.close()
