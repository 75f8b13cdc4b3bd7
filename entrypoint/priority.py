"""Lower a process's CPU priority, and its session's when the kernel schedules by session.

vLLM's engine core keeps a CPU core busy while it drives the model.  On a machine with
few cores, whatever shares that core with it (the gateway, health checks, a benchmark's
client) can then wait on the run queue for seconds: measured on a 2-core VM
(`python -m bench.gateway_bench --vllm-nice 0`), a client reading streams straight from
vLLM spent 69 % of the time runnable but without a CPU, and got most of each stream in
one burst at its end (docs/entrypoint.md, "vLLM's CPU priority").

A process's nice value only orders it against processes of its own scheduling group.
With `kernel.sched_autogroup_enabled=1` (the default on many distributions) every
POSIX session is a group of its own, and vLLM runs in a session of its own (its own
process group, so that it can be stopped as a whole), so its session's nice value
(`/proc/<pid>/autogroup`) is what counts against other POSIX sessions.  Both are set here.
Inside a container the cgroup decides instead and only the nice value applies among the
container's own processes.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
NICE_MAX = 19
# The kernel accepts one autogroup nice change per 100 ms, machine-wide (EAGAIN before).
AUTOGROUP_RETRY_SECONDS = 0.11
AUTOGROUP_TRIES = 10


def autogroup_enabled(switch: Path = AUTOGROUP_SWITCH) -> bool:
    try:
        return switch.read_text().strip() == "1"
    except OSError:
        return False


def autogroup_nice(pid: int) -> int | None:
    """The nice value of `pid`'s autogroup ("/autogroup-372 nice 10"), None without one."""
    try:
        words = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return int(words[-1]) if len(words) == 3 and words[1] == "nice" else None


def lower_priority(pid: int, nice: int) -> list[str]:
    """Give `pid` (a session leader that has not started its children yet) nice value
    `nice` (0-19), inherited by the processes it starts, and the same for its autogroup;
    either one already nicer is left as it is.

    Returns what could not be done, one sentence each (empty when all was done)."""
    if not 0 <= nice <= NICE_MAX:
        raise ValueError(f"nice must be 0-{NICE_MAX}, not {nice}")
    if nice == 0:
        return []
    problems = []
    try:
        # Never raise it: a process already nicer than asked stays as it is.
        if os.getpriority(os.PRIO_PROCESS, pid) < nice:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:
        problems.append(f"could not set nice {nice} on pid {pid}: {exc.strerror}")
    if autogroup_enabled() and (autogroup_nice(pid) or 0) < nice:
        problem = set_autogroup_nice(pid, nice)
        if problem:
            problems.append(problem)
    return problems


def lower_and_say(pid: int, nice: int, what: str, say: Callable[[str], None]) -> None:
    """`lower_priority` for a process just started (`what`: "vLLM", "Ray"), saying
    what was done or, as warnings, what could not be."""
    problems = lower_priority(pid, nice)
    for problem in problems:
        say(f"warning: {problem}")
    if not problems and nice:
        session = " (its session too: autogroup scheduling)" if autogroup_enabled() else ""
        say(f"{what} runs at nice {nice}{session}")


def set_autogroup_nice(pid: int, nice: int) -> str | None:
    path = Path(f"/proc/{pid}/autogroup")
    for _ in range(AUTOGROUP_TRIES):
        try:
            path.write_text(f"{nice}\n")
            return None
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                return f"could not set nice {nice} on the session of pid {pid}: {exc.strerror}"
        time.sleep(AUTOGROUP_RETRY_SECONDS)
    return f"could not set nice {nice} on the session of pid {pid}: the kernel kept refusing"
