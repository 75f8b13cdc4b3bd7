"""The memory this process may still use: the host's MemAvailable and, in a limited
container, its memory cgroup's.

A container with a memory limit is killed (or, on GB10, the driver fails) when its
cgroup runs out, whatever the host has left; so where the process's cgroup has a
limit, the smaller of the two figures counts. The cgroup's available figure is
`limit − (usage − inactive_file)`: file pages no process touched lately are given
back before anything is killed, as MemAvailable counts them on the host.

cgroup v2: `memory.max` ("max" = no limit), `memory.current`, `memory.stat`
`inactive_file`. cgroup v1: `memory.limit_in_bytes` (a value near 2**63 = no limit),
`memory.usage_in_bytes`, `memory.stat` `total_inactive_file` (the hierarchy's) and
`hierarchical_memory_limit` (the smallest limit of the group and its parents).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from entrypoint.hardware import HostMemory, host_memory

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB
# pages); anything this large is no limit on any machine.
V1_UNLIMITED_BYTES = 2**62


@dataclass(frozen=True)
class CgroupMemory:
    """One memory cgroup's limit, usage and inactive file pages, in bytes."""

    limit_bytes: int
    usage_bytes: int
    inactive_file_bytes: int

    @property
    def available_bytes(self) -> int:
        used = max(0, self.usage_bytes - self.inactive_file_bytes)
        return max(0, self.limit_bytes - used)


def stat_value(stat_text: str, key: str) -> int:
    """The value of `key` in a `memory.stat` file; ValueError when absent."""
    for line in stat_text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise ValueError(f"memory.stat has no {key}")


def parse_v2(max_text: str, current_text: str, stat_text: str) -> CgroupMemory | None:
    """cgroup v2 files → CgroupMemory; None when `memory.max` is "max" (no limit)."""
    if max_text.strip() == "max":
        return None
    return CgroupMemory(int(max_text), int(current_text), stat_value(stat_text, "inactive_file"))


def parse_v1(limit_text: str, usage_text: str, stat_text: str) -> CgroupMemory | None:
    """cgroup v1 files → CgroupMemory; None when neither the group nor a parent has a
    limit (v1's "unlimited")."""
    limit = int(limit_text)
    try:
        limit = min(limit, stat_value(stat_text, "hierarchical_memory_limit"))
    except ValueError:
        pass  # a kernel without it: the group's own limit
    if limit >= V1_UNLIMITED_BYTES:
        return None
    return CgroupMemory(limit, int(usage_text), stat_value(stat_text, "total_inactive_file"))


def own_cgroup_dirs(proc_cgroup_text: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Where this process's memory cgroup may be mounted, most specific first.

    `/proc/self/cgroup` names the v2 group (`0::/path`) and the v1 memory group
    (`N:memory:/path`); inside a container the mount's root is the container's own
    group, so the mount roots themselves come last."""
    dirs: list[Path] = []
    for line in proc_cgroup_text.splitlines():
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            dirs.append(root / relative)
        elif "memory" in controllers.split(","):
            dirs.append(root / "memory" / relative)
    return [*dirs, root, root / "memory"]


def read_group(directory: Path) -> CgroupMemory | None:
    """The limited cgroup at `directory` (v2 or v1 files), or None."""
    try:
        if (directory / "memory.max").is_file():
            return parse_v2(*_texts(directory, "memory.max", "memory.current", "memory.stat"))
        if (directory / "memory.limit_in_bytes").is_file():
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat")
            return parse_v1(*_texts(directory, *names))
    except (OSError, ValueError):
        return None
    return None


def _texts(directory: Path, *names: str) -> tuple[str, str, str]:
    first, second, third = ((directory / name).read_text() for name in names)
    return first, second, third


def read_cgroup(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> CgroupMemory | None:
    """This process's limited memory cgroup, or None (no limit, or no cgroup files)."""
    try:
        text = proc_cgroup.read_text()
    except OSError:
        text = ""
    for directory in own_cgroup_dirs(text, root):
        if directory.is_dir() and (group := read_group(directory)) is not None:
            return group
    return None


def effective(host: HostMemory, group: CgroupMemory | None) -> HostMemory:
    """The host's figures, bounded by the cgroup's where it has a limit (MemFree, the
    figure GB10's driver reports, stays the host's)."""
    if group is None:
        return host
    return HostMemory(
        total_bytes=min(host.total_bytes, group.limit_bytes),
        available_bytes=min(host.available_bytes, group.available_bytes),
        free_bytes=host.free_bytes,
    )


def read_memory() -> HostMemory:
    """What the memory watchdog and the host telemetry read: see the module docstring."""
    return effective(host_memory(), read_cgroup())
