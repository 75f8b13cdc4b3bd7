"""Reading available memory: cgroup v1 and v2 files (fixtures copied in the shape the
kernel writes them), this process's cgroup directories, and the smaller figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from entrypoint.hardware import HostMemory
from entrypoint.memory import (
    CgroupMemory,
    effective,
    own_cgroup_dirs,
    parse_v1,
    parse_v2,
    read_cgroup,
    read_group,
    stat_value,
)

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
GiB = 1024**3


def _texts(name: str, *files: str) -> tuple[str, str, str]:
    first, second, third = ((FIXTURES / name / f).read_text() for f in files)
    return first, second, third


def v1(name: str) -> CgroupMemory | None:
    return parse_v1(*_texts(name, "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"))


def v2(name: str) -> CgroupMemory | None:
    return parse_v2(*_texts(name, "memory.max", "memory.current", "memory.stat"))


def test_v2_available_is_the_limit_less_usage_without_inactive_file_pages() -> None:
    group = v2("v2")
    assert group == CgroupMemory(8 * GiB, 6 * GiB, 2 * GiB)
    assert group.available_bytes == 4 * GiB  # 8 − (6 − 2)


def test_v1_counts_the_hierarchys_inactive_file_pages() -> None:
    group = v1("v1")
    assert group == CgroupMemory(4 * GiB, 3 * GiB, 1 * GiB)  # total_inactive_file
    assert group.available_bytes == 2 * GiB


@pytest.mark.parametrize("read", [v1, v2], ids=["v1", "v2"])
def test_no_limit_is_no_cgroup_figure(read) -> None:
    assert read(f"{read.__name__}-unlimited") is None


def test_v1_takes_a_parents_smaller_limit() -> None:
    limit, usage, stat = _texts(
        "v1-unlimited", "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"
    )
    stat = stat.replace(
        "hierarchical_memory_limit 9223372036854771712", f"hierarchical_memory_limit {5 * GiB}"
    )
    group = parse_v1(limit, usage, stat)
    assert group is not None and group.limit_bytes == 5 * GiB


def test_usage_all_in_inactive_files_leaves_the_whole_limit_and_never_below_zero() -> None:
    assert CgroupMemory(GiB, GiB, 2 * GiB).available_bytes == GiB
    assert CgroupMemory(GiB, 3 * GiB, 0).available_bytes == 0


def test_a_stat_file_without_the_key_names_it() -> None:
    with pytest.raises(ValueError, match="inactive_file"):
        stat_value("anon 1\nfile 2\n", "inactive_file")


def test_the_own_group_comes_before_the_mount_roots(tmp_path: Path) -> None:
    text = "12:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/system.slice/x.service\n"
    assert own_cgroup_dirs(text, tmp_path) == [
        tmp_path / "memory" / "docker" / "abc",
        tmp_path / "system.slice" / "x.service",
        tmp_path,
        tmp_path / "memory",
    ]


def _mount(root: Path, group: str, fixture: str) -> Path:
    directory = root / group
    directory.mkdir(parents=True)
    for source in (FIXTURES / fixture).iterdir():
        (directory / source.name).write_text(source.read_text())
    return directory


def test_read_cgroup_finds_a_v1_containers_group_at_the_mount_root(tmp_path: Path) -> None:
    """Inside a v1 container /proc/self/cgroup names the host's path, which is not
    mounted there: the memory mount's root is the container's group."""
    _mount(tmp_path, "memory", "v1")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/docker/0123abcd\n")
    assert read_cgroup(tmp_path, proc) == v1("v1")


def test_read_cgroup_reads_the_v2_group_the_process_is_in(tmp_path: Path) -> None:
    _mount(tmp_path, "user.slice/job", "v2")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/user.slice/job\n")
    assert read_cgroup(tmp_path, proc) == v2("v2")


def test_unreadable_or_missing_files_are_no_cgroup_figure(tmp_path: Path) -> None:
    broken = _mount(tmp_path, "g", "v2")
    (broken / "memory.stat").write_text("anon 1\n")
    assert read_group(broken) is None
    assert read_cgroup(tmp_path / "absent", tmp_path / "absent-proc") is None


def test_the_smaller_available_figure_counts_and_memfree_stays_the_hosts() -> None:
    host = HostMemory(total_bytes=24 * GiB, available_bytes=20 * GiB, free_bytes=18 * GiB)
    limited = effective(host, CgroupMemory(4 * GiB, 3 * GiB, 0))
    assert limited == HostMemory(total_bytes=4 * GiB, available_bytes=GiB, free_bytes=18 * GiB)
    short_host = HostMemory(total_bytes=24 * GiB, available_bytes=GiB // 2, free_bytes=0)
    assert effective(short_host, CgroupMemory(4 * GiB, 0, 0)).available_bytes == GiB // 2
    assert effective(host, None) == host
