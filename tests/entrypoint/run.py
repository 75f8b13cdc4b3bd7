"""Run `python -m entrypoint` as the container would, for the tests that start vLLM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from entrypoint.child import RPC_ENV
from tests.vllm_proc import STARTUP_TIMEOUT_S, free_port, vllm_env


class EntrypointRun:
    """One entrypoint process (its own session) with its log in a file."""

    def __init__(self, model_dir: Path, log_path: Path, **settings: str) -> None:
        self.control_port = free_port()
        env = {k: v for k, v in vllm_env().items() if not k.startswith("SPARKSERVE_")}
        env.update(
            SPARKSERVE_MODEL=str(model_dir),
            SPARKSERVE_HOST="127.0.0.1",
            SPARKSERVE_PORT=str(free_port()),
            SPARKSERVE_CONTROL_PORT=str(self.control_port),
            SPARKSERVE_KV_CACHE_MEMORY_BYTES="256M",
            SPARKSERVE_MAX_MODEL_LEN="4096",
            SPARKSERVE_MAX_NUM_SEQS="4",
            SPARKSERVE_MAX_NUM_BATCHED_TOKENS="512",
            SPARKSERVE_VLLM_EXTRA_ARGS="--load-format dummy --enforce-eager",
            SPARKSERVE_STOP_GRACE_SECONDS="20",
        )
        env.pop(RPC_ENV, None)  # the entrypoint's own directory for vLLM's sockets
        env.update(settings)
        self.port = int(env["SPARKSERVE_PORT"])  # vLLM's OpenAI server
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "entrypoint"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.seen_pids: set[int] = set()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ready(self) -> tuple[int | None, str | None]:
        """/ready's status and phase (None, None while the endpoint is not up yet)."""
        try:
            answer = httpx.get(f"http://127.0.0.1:{self.control_port}/ready", timeout=2)
        except httpx.HTTPError:
            return None, None
        return answer.status_code, answer.json()["phase"]

    def note_descendants(self) -> list[psutil.Process]:
        """The entrypoint's descendants now (remembered, to check for orphans later)."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen_pids |= {child.pid for child in children}
        return children

    def vllm_pid(self) -> int:
        match = re.search(r"vLLM pid (\d+)", self.log())
        assert match, self.log()[-3000:]
        return int(match[1])

    def vllm_rpc_dir(self) -> Path:
        """Where the running vLLM binds its IPC sockets (the entrypoint chose it)."""
        return Path(psutil.Process(self.vllm_pid()).environ()[RPC_ENV])

    def wait_log(self, pattern: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if re.search(pattern, self.log()):
                return
            assert self.proc.poll() is None, f"entrypoint exited:\n{self.log()[-4000:]}"
            self.note_descendants()
            time.sleep(0.5)
        raise AssertionError(f"no {pattern!r} after {timeout_s} s:\n{self.log()[-4000:]}")

    def survivors(self) -> list[int]:
        alive = []
        for pid in self.seen_pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive

    def close(self) -> None:
        """Never leave anything running: kill its whole POSIX session if still there."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in self.survivors():
            os.kill(pid, signal.SIGKILL)
        self._log.close()
