"""The local stack under test, as processes on 127.0.0.1 with free ports:

  entrypoint (python -m entrypoint) → vLLM on the tiny dense model, eager, prefix caching
  gateway "main" → vLLM, small admission limit (so the ramp sheds load with 429)
  gateway "edge" → the fake upstream (stalls, firehose), short read timeout
  fake upstream (python -m reliability.fake_upstream)

Every process, and vLLM's own process group, is recorded; `close` stops them all and
`leftovers` says whether anything survived.
"""

from __future__ import annotations

import secrets
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
import psutil

from devtools.interrupt import stop_every
from reliability.procs import Proc, free_port, group_members, kill_groups

ROOT = Path(__file__).resolve().parents[1]
SERVED_MODEL = "tiny"
MAX_MODEL_LEN = 4096
MAX_NUM_SEQS = 8
GATEWAY_MAX_CONCURRENCY = 8
GATEWAY_QUEUE_SIZE = 4
GATEWAY_MAX_BODY_BYTES = 1024 * 1024
EDGE_READ_TIMEOUT_SECONDS = 2.0
READY_TIMEOUT_SECONDS = 600.0
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


class StackError(Exception):
    """The stack could not be started (the message carries the process' last lines)."""


@dataclass(frozen=True)
class Secrets:
    """Per-run credentials; the log scan looks for every one of them."""

    alice_key: str = field(default_factory=lambda: "sk-rel-alice-" + secrets.token_hex(12))
    bob_key: str = field(default_factory=lambda: "sk-rel-bob-" + secrets.token_hex(12))
    edge_key: str = field(default_factory=lambda: "sk-rel-edge-" + secrets.token_hex(12))
    salt_secret: str = field(default_factory=lambda: "salt-secret-" + secrets.token_hex(16))
    client_salt: str = field(default_factory=lambda: "client-salt-" + secrets.token_hex(8))
    canary: str = field(default_factory=lambda: "canary" + secrets.token_hex(6))

    def keys(self) -> list[str]:
        return [self.alice_key, self.bob_key, self.edge_key]


@dataclass(frozen=True)
class Ports:
    vllm: int
    control: int
    gateway: int
    edge: int
    fake: int

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port(), free_port())


def entrypoint_env(model_dir: Path, ports: Ports, warmup: bool) -> dict[str, str]:
    return {
        "SPARKSERVE_MODEL": str(model_dir),
        "SPARKSERVE_DEVICE": "cpu",
        "SPARKSERVE_SERVED_MODEL_NAME": SERVED_MODEL,
        "SPARKSERVE_HOST": "127.0.0.1",
        "SPARKSERVE_PORT": str(ports.vllm),
        "SPARKSERVE_CONTROL_PORT": str(ports.control),
        "SPARKSERVE_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "SPARKSERVE_MAX_NUM_SEQS": str(MAX_NUM_SEQS),
        "SPARKSERVE_MAX_NUM_BATCHED_TOKENS": "512",
        "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "256M",
        "SPARKSERVE_WARMUP": "on" if warmup else "off",
        # Below procs.STOP_GRACE_SECONDS, so vLLM stops before the group is killed.
        "SPARKSERVE_STOP_GRACE_SECONDS": "10",
        # vLLM's engine loop keeps a core busy; below the suite's client and the gateway
        # they are not starved by it on 2 cores (entrypoint/priority.py).
        "SPARKSERVE_VLLM_NICE": "10",
        # Random weights (the tiny model has none); eager: no compile step on CPU.
        "SPARKSERVE_VLLM_EXTRA_ARGS": "--load-format dummy --enforce-eager",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
    }


def gateway_env(ports: Ports, creds: Secrets, state_dir: Path) -> dict[str, str]:
    return {
        "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{ports.vllm}",
        "GATEWAY_CONTROL_URL": f"http://127.0.0.1:{ports.control}",
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(ports.gateway),
        "GATEWAY_API_KEYS": f"alice:{creds.alice_key},bob:{creds.bob_key}",
        "GATEWAY_SALT_SECRET": creds.salt_secret,
        "GATEWAY_STATE_DIR": str(state_dir),
        "GATEWAY_MAX_CONCURRENCY": str(GATEWAY_MAX_CONCURRENCY),
        "GATEWAY_MAX_CONCURRENCY_PER_KEY": str(GATEWAY_MAX_CONCURRENCY),
        "GATEWAY_QUEUE_SIZE": str(GATEWAY_QUEUE_SIZE),
        "GATEWAY_MAX_BODY_BYTES": str(GATEWAY_MAX_BODY_BYTES),
        "PYTHONUNBUFFERED": "1",
    }


def edge_env(ports: Ports, creds: Secrets, state_dir: Path) -> dict[str, str]:
    return {
        "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{ports.fake}",
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(ports.edge),
        "GATEWAY_API_KEYS": f"edge:{creds.edge_key}",
        "GATEWAY_SALT_SECRET": creds.salt_secret,
        "GATEWAY_STATE_DIR": str(state_dir),
        "GATEWAY_READ_TIMEOUT_SECONDS": str(EDGE_READ_TIMEOUT_SECONDS),
        "GATEWAY_CONNECT_TIMEOUT_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


class Stack:
    """Starts, restarts and stops the processes; knows their URLs and log files."""

    def __init__(self, run_dir: Path, model_dir: Path, *, warmup: bool) -> None:
        self.run_dir = run_dir
        self.model_dir = model_dir
        self.warmup = warmup
        self.ports = Ports.free()
        self.creds = Secrets()
        self.procs: dict[str, Proc] = {}
        self.pgids: set[int] = set()
        self.entrypoint_starts = 0

    # URLs -------------------------------------------------------------------------------
    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.gateway}"

    @property
    def edge_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.edge}"

    @property
    def vllm_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.vllm}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.control}"

    @property
    def fake_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.fake}"

    # Starting ---------------------------------------------------------------------------
    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        proc = Proc(name, argv, env, self.run_dir / f"{name}.log", ROOT)
        self.procs[name] = proc
        self.pgids.add(proc.pid)
        return proc

    def start_entrypoint(self) -> Proc:
        self.entrypoint_starts += 1
        env = entrypoint_env(self.model_dir, self.ports, self.warmup)
        return self._start("entrypoint", [sys.executable, "-m", "entrypoint"], env)

    def start_gateway(self) -> Proc:
        env = gateway_env(self.ports, self.creds, self.run_dir / "gateway-state")
        return self._start("gateway", [sys.executable, "-m", "gateway"], env)

    def start_edge(self) -> Proc:
        env = edge_env(self.ports, self.creds, self.run_dir / "edge-state")
        self._start(
            "fake-upstream",
            [sys.executable, "-m", "reliability.fake_upstream", "--port", str(self.ports.fake)],
            {},
        )
        return self._start("edge", [sys.executable, "-m", "gateway"], env)

    def start_all(self) -> None:
        self.start_entrypoint()
        self.start_gateway()
        self.start_edge()
        self.wait_for(f"{self.gateway_url}/healthz", "gateway", 60)
        self.wait_for(f"{self.edge_url}/healthz", "edge", 60)
        self.wait_for(f"{self.fake_url}/health", "fake-upstream", 60)
        self.wait_ready()

    def wait_for(self, url: str, name: str, timeout_s: float) -> float:
        """Poll `url` until 200 while `name` lives; seconds waited."""
        started = time.monotonic()
        while not http_ok(url):
            proc = self.procs[name]
            if not proc.alive():
                raise StackError(f"{name} exited {proc.popen.returncode}:\n{proc.log_tail()}")
            if time.monotonic() - started > timeout_s:
                raise StackError(f"{name}: {url} not 200 after {timeout_s:.0f} s")
            time.sleep(0.25)
        return time.monotonic() - started

    def wait_ready(self) -> float:
        seconds = self.wait_for(f"{self.control_url}/ready", "entrypoint", READY_TIMEOUT_SECONDS)
        child = self.vllm_child()
        if child is not None:
            self.pgids.add(child.pid)  # vLLM runs in its own group
        return seconds

    # Inspecting -------------------------------------------------------------------------
    def vllm_child(self) -> psutil.Process | None:
        """The vLLM API server the entrypoint started (None when there is none)."""
        entrypoint = self.procs.get("entrypoint")
        if entrypoint is None or not entrypoint.alive():
            return None
        for child in psutil.Process(entrypoint.pid).children():
            try:
                if VLLM_MODULE in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        return None

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def logs(self) -> dict[str, str]:
        return {
            name: proc.log_path.read_text(errors="replace") for name, proc in self.procs.items()
        }

    # Stopping ---------------------------------------------------------------------------
    def close(self) -> None:
        """Every process is stopped even when stopping one of them fails."""
        steps = [(name, proc.stop) for name, proc in reversed(list(self.procs.items()))]
        problems = stop_every(
            [*steps, ("what is left of their groups", partial(kill_groups, self.pgids))]
        )
        for problem in problems:
            print(f"reliability: {problem}", file=sys.stderr, flush=True)

    def leftovers(self) -> list[str]:
        return [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in _safe(group_members(self.pgids))]


def _safe(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for process in processes:
        try:
            process.cmdline()
            alive.append(process)
        except psutil.Error:
            continue
    return alive
