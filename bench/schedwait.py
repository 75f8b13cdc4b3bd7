"""How long processes sat runnable but without a CPU (Linux schedstat).

On a small machine shared with vLLM, a benchmark's client or a proxy can wait on the run
queue for seconds while vLLM's engine loop holds the CPUs; the latencies it records then
measure the scheduler, not the path (docs/entrypoint.md, "vLLM's CPU priority").  The
benchmarks print these shares so that such a run shows it.
"""

from __future__ import annotations

import contextlib
import glob
import time
from pathlib import Path

import psutil

# Past this share of the wall time spent waiting for a CPU, a benchmark warns.
STARVED_SHARE = 0.10


def run_queue_wait(pid: int) -> float:
    """Seconds all of `pid`'s threads have spent runnable but not running (0 when gone)."""
    return _schedstat(pid, 1)


def cpu_time(pid: int) -> float:
    """Seconds all of `pid`'s threads have run on a CPU (0 when gone).  The threads that
    ended meanwhile are no longer counted: for a server whose threads outlive its
    requests (vLLM's API server: its loop and pools)."""
    return _schedstat(pid, 0)


def _schedstat(pid: int, field: int) -> float:
    """A field of /proc/PID/task/*/schedstat (ns: 0 on a CPU, 1 waiting for one), summed
    over the threads, in seconds."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(path).read_text().split()[field])
    return total / 1e9


def _family(pid: int) -> list[int]:
    """`pid` and its descendants now (nginx's workers are its master's children)."""
    try:
        process = psutil.Process(pid)
        return [pid, *(child.pid for child in process.children(recursive=True))]
    except psutil.Error:
        return [pid]


class WaitMeter:
    """Run-queue wait of named processes (with their descendants) from now on."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._families = {name: _family(pid) for name, pid in pids.items()}
        self._start = {name: self._waited(name) for name in self._families}
        self._started = time.monotonic()

    def _waited(self, name: str) -> float:
        return sum(run_queue_wait(pid) for pid in self._families[name])

    def shares(self) -> dict[str, float]:
        """Waited seconds / wall seconds since the start, per name."""
        wall = max(time.monotonic() - self._started, 1e-9)
        return {name: (self._waited(name) - self._start[name]) / wall for name in self._families}


def describe(shares: dict[str, float]) -> str:
    """One line, and a warning when something was starved."""
    line = "waiting for a CPU while measuring (runnable, not running): " + ", ".join(
        f"{name} {share:.0%}" for name, share in shares.items()
    )
    starved = [name for name, share in shares.items() if share > STARVED_SHARE]
    if starved:
        line += (
            f"\nwarning: {', '.join(starved)} waited more than {STARVED_SHARE:.0%} of the time "
            "for a CPU: these figures measure the CPU scheduler as much as the paths.  On a "
            "machine shared with vLLM, run it below them (SPARKSERVE_VLLM_NICE=10; "
            'docs/entrypoint.md, "vLLM\'s CPU priority")'
        )
    return line
