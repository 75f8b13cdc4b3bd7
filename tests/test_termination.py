"""SIGTERM to a pytest run tears its session down (tests/termination.py, on
devtools/interrupt.py): a child process a session fixture started is stopped, as the
shared vLLM is; the reliability CLI reports the interruption."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.interrupt import stop_every
from tests.vllm_proc import VLLMServer, free_port

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import subprocess, time
from pathlib import Path

import pytest

STATE = Path(__file__).parent


@pytest.fixture(scope="session")
def child():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    (STATE / "child.pid").write_text(str(proc.pid))
    yield proc
    proc.terminate()
    proc.wait()
    (STATE / "torn-down").touch()


def test_runs_until_stopped(child):
    (STATE / "running").touch()
    time.sleep(600)
"""


def _left_alive(pids: list[int], wait_s: float = 10.0) -> list[int]:
    """The pids still alive after up to `wait_s` for them to go."""
    deadline = time.monotonic() + wait_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie no one reaped yet is gone for every purpose here.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _run_and_terminate(tmp_path: Path, plugin: bool) -> tuple[int, int]:
    """(exit status of the inner pytest, pid of its fixture's child)."""
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    args += ["-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)]
    if plugin:
        args += ["-p", "tests.termination"]
    proc = subprocess.Popen(
        [*args, str(tmp_path / "test_inner.py")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "running").exists():
        assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
        assert time.monotonic() < deadline, "the inner test never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    return proc.returncode, int((tmp_path / "child.pid").read_text())


def test_sigterm_runs_the_session_teardown(tmp_path: Path) -> None:
    status, child = _run_and_terminate(tmp_path, plugin=True)
    assert (tmp_path / "torn-down").exists()
    assert not _alive(child)
    assert status == pytest.ExitCode.INTERRUPTED


def test_without_it_sigterm_leaves_the_child_running(tmp_path: Path) -> None:
    status, child = _run_and_terminate(tmp_path, plugin=False)
    try:
        assert status == -signal.SIGTERM
        assert not (tmp_path / "torn-down").exists()
        assert _alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


def test_the_reliability_cli_says_it_was_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import reliability.cli as cli

    for raised, said in (
        (KeyboardInterrupt("stopped by SIGTERM"), "stopped by SIGTERM"),
        (KeyboardInterrupt(), "Ctrl-C"),
    ):

        def stopped(*args: object, error: BaseException = raised) -> None:
            raise error

        monkeypatch.setattr(cli, "run", stopped)
        status = cli.main(["run", "--short", "--out", str(tmp_path)])
        assert status == cli.EXIT_INTERRUPTED == 130
        err = capsys.readouterr().err
        assert f"interrupted ({said}); the stack it started is stopped" in err
        assert "Traceback" not in err


@pytest.mark.vllm
def test_sigterm_to_the_gateway_bench_stops_its_gateway(vllm_server: VLLMServer) -> None:
    """The overhead bench (against the shared vLLM, so it starts only the standalone
    gateway) ends like Ctrl-C under SIGTERM: exit 130, one line saying so, no
    traceback, and its gateway is gone."""
    argv = ["--rounds", "200", "--no-nginx", "--vllm-url", vllm_server.url, "--concurrency", "1"]
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench.gateway_bench", *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        children: list[int] = []
        deadline = time.monotonic() + 60
        while not children and time.monotonic() < deadline:
            children = [
                int(pid)
                for pid in subprocess.run(
                    ["pgrep", "-P", str(bench.pid)], capture_output=True, text=True
                ).stdout.split()
            ]
            time.sleep(0.2)
        assert children, "the bench did not start its gateway"
        time.sleep(1.0)
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 130, err
    assert "gateway_bench: interrupted (stopped by SIGTERM)" in err
    assert "Traceback" not in err
    assert _left_alive(children) == []


DEMO_WITH_SLEEPERS = """
import signal, sys
from tools import demo

# Ctrl-C as a terminal gives it, even where this test runs with SIGINT ignored (a
# background job of a shell, nohup), which Python would inherit.
signal.signal(signal.SIGINT, signal.default_int_handler)

def start_stack(procs, ports, run_dir):
    for name in ("entrypoint", "gateway", "prometheus"):
        procs.start(name, ["sleep", "600"], {})
    print("pids " + " ".join(str(p.pid) for _, p in procs.running), file=sys.stderr, flush=True)

demo.start_stack = start_stack
sys.exit(demo.main(sys.argv[1:]))
"""


def test_ctrl_c_after_the_demos_output_is_gone_still_stops_every_service() -> None:
    """`make demo | tee demo.log`, then Ctrl-C, which ends tee too: the demo's lines go
    to a closed pipe, and every service it started must still be stopped. The services
    are sleepers standing in for vLLM, the gateway and Prometheus (the stop is the case)."""
    ports = []
    for name in ("vllm", "control", "gateway", "prometheus"):
        ports += [f"--{name}-port", str(free_port())]
    demo = subprocess.Popen(
        [sys.executable, "-c", DEMO_WITH_SLEEPERS, *ports],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stderr is not None and demo.stdout is not None
        line = demo.stderr.readline()
        assert line.startswith("pids "), line
        children = [int(pid) for pid in line.split()[1:]]
        assert len(children) == 3
        demo.stdout.close()  # tee is gone
        time.sleep(0.5)
        demo.send_signal(signal.SIGINT)
        _, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, err
    assert "Traceback" not in err
    assert _left_alive(children) == []


def test_every_stop_step_runs_when_one_of_them_fails() -> None:
    ran: list[str] = []

    def failing() -> None:
        ran.append("gateway")
        raise PermissionError("not allowed")

    problems = stop_every(
        [
            ("vllm", lambda: ran.append("vllm")),
            ("gateway", failing),
            ("prometheus", lambda: ran.append("prometheus")),
        ]
    )
    assert ran == ["vllm", "gateway", "prometheus"]
    assert problems == ["stopping gateway: PermissionError: not allowed"]
