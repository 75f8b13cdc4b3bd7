"""The vLLM child (and `ray start` on a cluster node): its own process group, its
output forwarded line by line.

Stopping it signals the whole group (the API server and its EngineCore
processes): SIGTERM, wait the grace period, SIGKILL; then any process left in the
group is killed, so nothing outlives the entrypoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO

import psutil

from entrypoint.console import Console
from entrypoint.logscan import LogWatcher
from entrypoint.planning import Launch

TAIL_LINES = 200
ZOMBIE = psutil.STATUS_ZOMBIE
READER_DRAIN_SECONDS = 0.5
GROUP_EXIT_WAIT_SECONDS = 2.0
# Where vLLM binds its ZMQ IPC sockets (vllm/envs.py; default: the temp directory).
RPC_ENV = "VLLM_RPC_BASE_PATH"
RPC_DIR_PREFIX = "sparkserve-vllm-rpc-"


@contextlib.contextmanager
def private_rpc_dir(environ: dict[str, str]) -> Iterator[dict[str, str]]:
    """`environ` with vLLM's IPC sockets in a directory of this start, removed after.

    vLLM binds several ZMQ sockets under `VLLM_RPC_BASE_PATH` at each start (API
    server, engine core, output) and leaves them there, after a clean stop as after a
    kill: outside a container, /tmp filled up with them.  A path the user set is kept
    as it is.  Only for vLLM on one node: on a Ray cluster vLLM copies its `VLLM_*`
    variables to every node, where this directory does not exist."""
    try:
        path = None if environ.get(RPC_ENV) else tempfile.mkdtemp(prefix=RPC_DIR_PREFIX)
    except OSError:  # no writable temp directory: vLLM's default, and vLLM's own error
        path = None
    if path is None:
        yield environ
        return
    try:
        yield {**environ, RPC_ENV: path}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def reap_orphans(own_child: int) -> None:
    """As PID 1, reap exited processes re-parented to us (never our own child: Popen does)."""
    if os.getpid() != 1:
        return
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in (0, own_child):
            return
        os.waitpid(info.si_pid, 0)


def describe_returncode(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name} (code {128 - code})"
    return f"exit code {code}"


class VLLMChild:
    """A started vLLM; `poll()` is None while it runs."""

    def __init__(
        self,
        launch: Launch,
        console: Console,
        watcher: LogWatcher,
        environ: dict[str, str],
        forward: Callable[[str], None] | None = None,
        name: str = "vLLM",
    ) -> None:
        """`forward` prints each line (default: console.vllm; `ray start` uses console.ray)."""
        self._name = name
        self._console = console
        self._watcher = watcher
        self._print = forward or console.vllm
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._tail_lock = threading.Lock()
        self.proc = subprocess.Popen(
            launch.argv,
            env={**environ, **launch.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            bufsize=0,
        )
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        self._reader = threading.Thread(
            target=self._forward, args=(self.proc.stdout,), name="vllm-output", daemon=True
        )
        self._reader.start()

    def _forward(self, stream: IO[bytes]) -> None:
        with stream:  # closed at EOF: the group is gone
            for raw in iter(stream.readline, b""):
                self._forward_line(raw)

    def _forward_line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip("\r\n")
        line = text.rsplit("\r", 1)[-1]  # progress bars redraw with \r
        with self._tail_lock:
            self._tail.append(line)
        self._print(line)
        for message in self._watcher.feed(line):
            self._console.phase(message)

    def poll(self) -> int | None:
        return self.proc.poll()

    def tail(self, lines: int) -> list[str]:
        """The last lines vLLM printed (after letting the reader drain a moment)."""
        self._reader.join(timeout=READER_DRAIN_SECONDS)
        with self._tail_lock:
            return list(self._tail)[-lines:]

    def _signal_group(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def _group_alive(self) -> bool:
        """Whether any process of vLLM's group still runs (zombies waiting for a reaper
        that is not us do not count: they hold no memory and no port)."""
        for process in psutil.process_iter():
            try:
                if os.getpgid(process.pid) == self.pid and process.status() != ZOMBIE:
                    return True
            except (ProcessLookupError, psutil.Error):
                continue
        return False

    def _wait_group(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.proc.poll()
            reap_orphans(self.pid)
            if not self._group_alive():
                return True
            sleep(0.1)
        return False

    def stop(self, grace_seconds: float) -> int:
        """SIGTERM the group, SIGKILL what is left after the grace period; vLLM's code."""
        if self.proc.poll() is None and self._signal_group(signal.SIGTERM):
            if not self._wait_group(grace_seconds):
                self._console.say(f"{self._name} still running after {grace_seconds:g} s: SIGKILL")
        self.kill_group()
        return self.proc.wait()

    def kill_group(self) -> None:
        """SIGKILL every process left in vLLM's group (EngineCore after a dead parent)."""
        if self._signal_group(signal.SIGKILL):
            self._wait_group(GROUP_EXIT_WAIT_SECONDS)
        self.proc.poll()
