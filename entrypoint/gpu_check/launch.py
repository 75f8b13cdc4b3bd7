"""One `python -m entrypoint` start, driven from outside: its output stamped, /ready
awaited, SIGTERM at the end.

The check launches the entrypoint as the container does, so vLLM starts through the
entrypoint's own plan, pre-flight, supervisor and warm-up; every line it prints is kept
with its seconds since launch (`+12.34s [vllm] …`), the form entrypoint/gpu_check/phases.py
reads.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import httpx

POLL_S = 0.1
READY_TIMEOUT_S = 2.0
STOP_MARGIN_S = 30.0  # beyond the entrypoint's own SIGTERM → SIGKILL grace
DRAIN_S = 10.0  # for the last lines after the entrypoint exits


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class StampedLog:
    """Copies a child's output to a file, each line prefixed by seconds since `t0`;
    `echo` sees each line as it comes (the check prints the entrypoint's own)."""

    def __init__(self, source: IO[str], path: Path, t0: float, echo: Callable[[str], None]) -> None:
        self.t0 = t0
        self._source = source
        self._echo = echo
        self._out = path.open("w")
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._copy, name="log", daemon=True)
        self._thread.start()

    def _write(self, text: str) -> None:
        with self._lock:
            if not self._out.closed:
                self._out.write(f"+{time.monotonic() - self.t0:.2f}s {text}\n")
                self._out.flush()

    def _copy(self) -> None:
        for line in self._source:
            text = line.rstrip()
            self._write(text)
            self._echo(text)

    def mark(self, text: str) -> None:
        """A line of the check's own (`[gpu-check] …`), in the same log."""
        self._write(f"[gpu-check] {text}")

    def close(self, last: str) -> None:
        """Copy what the child still wrote (up to DRAIN_S), add `last`, close."""
        self._thread.join(DRAIN_S)
        self.mark(last)
        with self._lock:
            self._out.close()


class EntrypointProcess:
    """`python -m entrypoint ARGS` in its own session, its output in `log_path`."""

    def __init__(
        self,
        args: Sequence[str],
        env: dict[str, str],
        log_path: Path,
        echo: Callable[[str], None],
    ) -> None:
        t0 = time.monotonic()
        self.started = t0
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "entrypoint", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.log = StampedLog(self.proc.stdout, log_path, t0, echo)

    def wait_ready(self, control_url: str, timeout_s: float) -> str:
        """`ready` once /ready answers 200; `exited` or `timeout` before."""
        deadline = self.started + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return "exited"
            try:
                if httpx.get(f"{control_url}/ready", timeout=READY_TIMEOUT_S).status_code == 200:
                    return "ready"
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S)
        return "timeout"

    def stop(self, grace_s: float) -> int:
        """SIGTERM (the entrypoint stops vLLM's group), SIGKILL of its session if it
        hangs; its exit code, as `python -m entrypoint` reports it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s + STOP_MARGIN_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        code = self.proc.returncode
        self.log.close(f"entrypoint exited {code}")
        return code
