"""What the host's CPUs did during one request round, read beside its TTFT.

Where the GPU does the same work in the first round as in the steady ones, a slower
first request is host time: the server's Python and kernel launches ran longer, or they
waited for a CPU. One reading per round tells those apart:

- `server_cpu_seconds`: user + system time of the server's processes (the entrypoint,
  vLLM's API server and engine) during the round. More CPU for the same requests means
  the host did more work or ran slower per instruction.
- `forced_switches`: the server's involuntary context switches: the kernel took a CPU
  from it for something else.
- `other_cpu_seconds`: every CPU's busy time less the server's and this check's own:
  what else ran on the machine meanwhile.
- `steal_seconds`: `/proc/stat`'s steal: a hypervisor ran another guest on our CPUs.
- `throttled_seconds`: the cgroup's `cpu.stat` throttled time: the container's CPU quota
  held it back (None where no quota is accounted).
- `cpu_mhz`: the CPUs' mean clock at the round's end, as the kernel reports it (None
  where it does not).
- `by_process`: the server's CPU seconds by process name (vLLM names its engine
  `VLLM::EngineCore`), so a grown total points at the API server or at the engine.

Readings come from psutil and the cgroup's own file; nothing here is vLLM-specific.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# cgroup v2 reports microseconds, v1 nanoseconds.
CGROUP_CPU_STAT = (
    (Path("/sys/fs/cgroup/cpu.stat"), "throttled_usec", 1e-6),
    (Path("/sys/fs/cgroup/cpu/cpu.stat"), "throttled_time", 1e-9),
    (Path("/sys/fs/cgroup/cpu,cpuacct/cpu.stat"), "throttled_time", 1e-9),
)


@dataclass(frozen=True)
class HostUse:
    """The host during one round (see the module's docstring)."""

    wall_seconds: float
    server_cpu_seconds: float
    forced_switches: int
    other_cpu_seconds: float
    steal_seconds: float
    throttled_seconds: float | None
    cpu_mhz: float | None
    by_process: dict[str, float] = field(default_factory=dict)


def throttled_seconds(
    sources: tuple[tuple[Path, str, float], ...] = CGROUP_CPU_STAT,
) -> float | None:
    """The cgroup's total throttled time so far; None where no file accounts it."""
    for path, key, scale in sources:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value) * scale
    return None


def _busy_seconds() -> tuple[float, float]:
    """Every CPU's busy time and steal time so far."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    steal = getattr(t, "steal", 0.0)
    return sum(t) - idle - steal - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0), steal


def _mean_mhz() -> float | None:
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        return None
    return freq.current if freq and freq.current > 0 else None


def _tree(root_pid: int) -> dict[int, tuple[float, int, str]]:
    """Per process of `root_pid`'s tree: CPU seconds, involuntary switches, name."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    out = {}
    for proc in procs:
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                out[proc.pid] = (
                    t.user + t.system,
                    proc.num_ctx_switches().involuntary,
                    proc.name(),
                )
        except psutil.Error:
            continue
    return out


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class Reading:
    """What `HostMeter.round` read, set once its block is done."""

    use: HostUse | None = None


class HostMeter:
    """Reads the host around a round: `with meter.round() as reading: …`, then
    `reading.use`."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    @contextmanager
    def round(self) -> Iterator[Reading]:
        # The wall time spans the readings too, so no CPU time is counted outside it.
        started = time.perf_counter()
        start_tree, (start_busy, start_steal) = _tree(self.server_pid), _busy_seconds()
        start_own, start_throttle = _own_cpu(), throttled_seconds()
        reading = Reading()
        yield reading
        end_tree, (end_busy, end_steal) = _tree(self.server_pid), _busy_seconds()
        own, end_throttle = _own_cpu() - start_own, throttled_seconds()
        wall = time.perf_counter() - started
        both = start_tree.keys() & end_tree.keys()  # alive at both readings
        switches = sum(end_tree[pid][1] - start_tree[pid][1] for pid in both)
        by_process: dict[str, float] = {}
        for pid in both:
            name = end_tree[pid][2]
            by_process[name] = by_process.get(name, 0.0) + end_tree[pid][0] - start_tree[pid][0]
        server = sum(by_process.values())
        throttled = (
            None
            if start_throttle is None or end_throttle is None
            else end_throttle - start_throttle
        )
        reading.use = HostUse(
            wall_seconds=wall,
            server_cpu_seconds=server,
            forced_switches=switches,
            other_cpu_seconds=max(0.0, end_busy - start_busy - server - own),
            steal_seconds=end_steal - start_steal,
            throttled_seconds=throttled,
            cpu_mhz=_mean_mhz(),
            by_process=by_process,
        )
