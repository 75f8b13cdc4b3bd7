"""entrypoint/gpu_check/host.py: the host's CPUs over one round, read from real processes
(the server's tree is a shell and the Python it runs) and from cgroup files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from entrypoint.gpu_check import first_request
from entrypoint.gpu_check.first_request import Round, Run, Stream
from entrypoint.gpu_check.host import HostMeter, HostUse, throttled_seconds
from entrypoint.gpu_check.report import host_rows

BURN_S = 0.3
# Waits for a line on stdin, then spends BURN_S of CPU time, then says so and sleeps.
BURNER = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    "t = time.process_time()\n"
    f"while time.process_time() - t < {BURN_S}: pass\n"
    "print('done', flush=True)\n"
    "time.sleep(30)\n"
)


def test_the_server_tree_s_cpu_is_read_across_a_round() -> None:
    # `; true` keeps bash from exec'ing Python: the burner is the shell's child.
    with subprocess.Popen(
        ["bash", "-c", f'{sys.executable} -c "$0"; true', BURNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as shell:
        try:
            use = _burn_once(shell)
        finally:
            subprocess.run(["pkill", "-P", str(shell.pid)], check=False)
            shell.kill()
    assert use.wall_seconds >= BURN_S
    assert BURN_S * 0.9 <= use.server_cpu_seconds <= use.wall_seconds + 0.1
    (busiest, seconds), *_ = sorted(use.by_process.items(), key=lambda kv: -kv[1])
    assert busiest.startswith("python") and seconds >= BURN_S * 0.9
    assert use.by_process.get("bash", 0.0) < 0.05
    assert use.steal_seconds >= 0 and use.other_cpu_seconds >= 0


def _burn_once(shell: subprocess.Popen[str]) -> HostUse:
    """One round over the shell's tree while its Python burns BURN_S."""
    assert shell.stdin is not None and shell.stdout is not None
    time.sleep(0.5)  # the interpreter is up and waiting (its start is not the round)
    with HostMeter(shell.pid).round() as reading:
        shell.stdin.write("go\n")
        shell.stdin.flush()
        assert shell.stdout.readline().strip() == "done"
    assert reading.use is not None
    return reading.use


def test_a_server_that_is_gone_reads_as_no_server_cpu() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    with HostMeter(gone.pid).round() as reading:
        time.sleep(0.01)
    assert reading.use is not None
    assert reading.use.server_cpu_seconds == 0 and reading.use.by_process == {}


@pytest.mark.parametrize(
    ("text", "key", "scale", "expected"),
    [
        ("usage_usec 9\nnr_throttled 3\nthrottled_usec 2500000\n", "throttled_usec", 1e-6, 2.5),
        ("nr_periods 10\nthrottled_time 1500000000\n", "throttled_time", 1e-9, 1.5),
    ],
)
def test_cgroup_throttled_time_in_v2_and_v1_units(
    tmp_path: Path, text: str, key: str, scale: float, expected: float
) -> None:
    stat = tmp_path / "cpu.stat"
    stat.write_text(text)
    assert throttled_seconds(((stat, key, scale),)) == pytest.approx(expected)


def test_no_cgroup_file_means_not_accounted_and_the_first_file_found_wins(
    tmp_path: Path,
) -> None:
    missing, v1 = tmp_path / "none" / "cpu.stat", tmp_path / "cpu.stat"
    assert throttled_seconds(((missing, "throttled_usec", 1e-6),)) is None
    v1.write_text("throttled_time 2000000000\n")
    sources = ((missing, "throttled_usec", 1e-6), (v1, "throttled_time", 1e-9))
    assert throttled_seconds(sources) == pytest.approx(2.0)
    v1.write_text("nr_periods 4\n")  # a quota file without the throttled line
    assert throttled_seconds(sources) is None


def test_the_report_puts_each_round_s_ttft_beside_its_host_reading() -> None:
    host = HostUse(1.5, 0.9, 12, 0.2, 0.0, None, 2400.0, {"VLLM::EngineCore": 0.7, "vllm": 0.2})
    later = HostUse(1.0, 0.5, 3, 0.0, 0.01, 0.25, None, {})
    run = Run(
        "x",
        [
            Round("chat", 0.0, [Stream(0.1, [0.01], 2)], host),
            Round("chat", 2.0, [Stream(0.08, [0.01], 2)], later),
            Round("chat", 3.0, [Stream(0.08, [0.01], 2)]),  # not read: left out
        ],
    )
    rows = host_rows(run)
    assert rows[2] == (
        "| chat | first | 100 ms | 1500 ms | 900 ms | 0.60 | 12 | `VLLM::EngineCore` 700 ms "
        "| 200 ms | 0 ms | – | 2400 |"
    )
    assert (
        rows[3]
        == "| chat | 1 | 80 ms | 1000 ms | 500 ms | 0.50 | 3 | – | 0 ms | 10 ms | 250 ms | – |"
    )
    assert len([r for r in rows if r.startswith("| chat")]) == 2
    assert host_rows(Run("y", [Round("chat", 0.0, [Stream(0.1, [], 1)])])) == ["Not read."]
    assert host_rows(None) == ["Not read."]


def test_the_cli_refuses_a_server_pid_that_is_not_running(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(SystemExit) as exited:
        first_request.parse_args(["--server-pid", str(gone.pid)])
    assert exited.value.code == 2
    assert f"--server-pid {gone.pid}: no such process" in capsys.readouterr().err
    assert first_request.parse_args(["--server-pid", str(os.getpid())]).server_pid == os.getpid()
