"""Local processes the suite starts: each in its own session, logged to a file, stopped
with SIGTERM → grace → SIGKILL of its whole group, and accounted for at the end
(`leftovers` lists any process of any group the suite created that still runs)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

STOP_GRACE_SECONDS = 20.0
POLL_SECONDS = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """One started process (the leader of its own process group)."""

    def __init__(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path
    ) -> None:
        self.name = name
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                list(argv),
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=cwd,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_exit(self, timeout_s: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, grace_s: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM the group, SIGKILL it after `grace_s`; the leader's exit code."""
        _signal_group(self.pid, signal.SIGTERM)
        code = self.wait_exit(grace_s)
        _signal_group(self.pid, signal.SIGKILL)
        return code if code is not None else self.popen.wait()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgids: set[int]) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is one of `pgids`."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) in pgids and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def kill_groups(pgids: set[int], settle_s: float = 5.0) -> None:
    for pgid in pgids:
        _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + settle_s
    while group_members(pgids) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


def rss_bytes(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def open_fds(pid: int) -> int:
    return int(psutil.Process(pid).num_fds())
