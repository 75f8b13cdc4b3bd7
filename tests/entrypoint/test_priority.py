"""entrypoint/priority.py on real processes: nice value, inheritance, the POSIX session's group."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from entrypoint.config import load_config
from entrypoint.errors import ConfigError
from entrypoint.priority import autogroup_enabled, autogroup_nice, lower_priority

# The child starts a grandchild only after it is told to, as vLLM starts its engine
# seconds after its own start; it prints the grandchild's pid.
SPAWNER = (
    "import subprocess, sys, time\n"
    "sys.stdin.readline()\n"
    "child = subprocess.Popen(['sleep', '60'])\n"
    "print(child.pid, flush=True)\n"
    "child.wait()\n"
)


@pytest.fixture
def session_leader() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SPAWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with proc:
        yield proc
        os.killpg(proc.pid, 9)


def _start_grandchild(proc: subprocess.Popen[str]) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return int(proc.stdout.readline())


def test_the_leader_its_later_children_and_its_session_get_the_nice_value(
    session_leader: subprocess.Popen[str],
) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    nice = max(ours, 5)
    assert lower_priority(session_leader.pid, nice) == []
    grandchild = _start_grandchild(session_leader)
    assert os.getpriority(os.PRIO_PROCESS, session_leader.pid) == nice
    assert os.getpriority(os.PRIO_PROCESS, grandchild) == nice
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours  # the caller is left alone
    if autogroup_enabled():
        assert autogroup_nice(session_leader.pid) == nice
        assert autogroup_nice(grandchild) == nice  # the same session, the same group
        assert autogroup_nice(os.getpid()) != nice or ours == nice


def test_zero_changes_nothing(session_leader: subprocess.Popen[str]) -> None:
    before = os.getpriority(os.PRIO_PROCESS, session_leader.pid)
    group_before = autogroup_nice(session_leader.pid)
    assert lower_priority(session_leader.pid, 0) == []
    assert os.getpriority(os.PRIO_PROCESS, session_leader.pid) == before
    assert autogroup_nice(session_leader.pid) == group_before


def test_a_process_already_nicer_is_not_raised(session_leader: subprocess.Popen[str]) -> None:
    os.setpriority(os.PRIO_PROCESS, session_leader.pid, 15)
    assert lower_priority(session_leader.pid, 3) == []
    assert os.getpriority(os.PRIO_PROCESS, session_leader.pid) == 15


def test_a_gone_process_is_a_sentence_not_a_traceback() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    problems = lower_priority(proc.pid, 4)
    assert problems and all(f"pid {proc.pid}" in problem for problem in problems)


@pytest.mark.parametrize("nice", [-1, 20])
def test_out_of_range_is_refused(nice: int) -> None:
    with pytest.raises(ValueError, match="0-19"):
        lower_priority(os.getpid(), nice)


@pytest.mark.parametrize("raw", ["20", "-3", "ten", "1.5"])
def test_the_setting_names_itself_and_what_is_allowed(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"SPARKSERVE_MODEL": "/m", "SPARKSERVE_VLLM_NICE": raw})
    message = str(caught.value)
    assert "SPARKSERVE_VLLM_NICE" in message and "0-19" in message and raw in message


def test_the_setting_defaults_to_leaving_vllm_alone() -> None:
    assert load_config({"SPARKSERVE_MODEL": "/m"}).vllm_nice == 0
    assert load_config({"SPARKSERVE_MODEL": "/m", "SPARKSERVE_VLLM_NICE": "10"}).vllm_nice == 10
