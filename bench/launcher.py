"""Start a server through the entrypoint (or any launcher command), wait for /ready, stop it.

The launcher is a subprocess in its own session configured by SPARKSERVE_* env;
it must serve vLLM's OpenAI API on SPARKSERVE_PORT and answer 200 on
`/ready` of SPARKSERVE_CONTROL_PORT once warmed up (docs/entrypoint.md).  A launcher
that exits before it is ready fails the setting at once, with its last log lines.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from bench.errors import LaunchError
from entrypoint.planning import launcher_prefix

DEFAULT_LAUNCHER = (sys.executable, "-m", "entrypoint")
POLL_S = 1.0
LOG_TAIL_CHARS = 3000


def vllm_server_argv(model: str | Path, port: int, args: Sequence[str]) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1:`port` serving `model` with `args`, started as
    the entrypoint starts it without a console script (entrypoint/planning.py)."""
    return [
        *launcher_prefix(None),
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *args,
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class LaunchSpec:
    command: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    ready_timeout_s: float = 1800.0
    stop_grace_s: float = 30.0
    port: int = field(default_factory=free_port)
    control_port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}/ready"

    def full_env(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        env.update(
            SPARKSERVE_HOST="127.0.0.1",
            SPARKSERVE_PORT=str(self.port),
            SPARKSERVE_CONTROL_PORT=str(self.control_port),
            PYTHONUNBUFFERED="1",
        )
        return env


class LaunchedServer:
    """Context manager: started and ready inside, stopped (SIGTERM, then SIGKILL) after."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LaunchedServer:
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spec.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                list(self.spec.command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.spec.full_env(),
                start_new_session=True,
            )
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log_tail(self) -> str:
        try:
            return self.spec.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise LaunchError(
                    f"launcher exited {code} before ready; log tail:\n{self.log_tail()}"
                )
            if _ready(self.spec.ready_url):
                return
            time.sleep(POLL_S)
        raise LaunchError(
            f"not ready after {self.spec.ready_timeout_s:g}s; log tail:\n{self.log_tail()}"
        )

    def stop(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.spec.stop_grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode


def _ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == httpx.codes.OK
    except httpx.HTTPError:
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
