"""`tools/two_nodes.sh` on CPU: two namespace "nodes" joined by a veth pair.

What runs here: the nodes set up and torn down leaving nothing behind; each node's own
network, IPC namespace and /dev/shm; tools.link_probe (gloo) across the veth; Ray's head in
one node and the entrypoint's worker role in the other, joined over the veth, then the
head killed and the worker's entrypoint leaving with exit 3 and its line. The GPU runs
(vLLM TP 2 / PP 2 through Ray) need the nvidia-h200-x2 machine (docs/deploy.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "tools" / "two_nodes.sh"
MISSING = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and veth pairs need root"),
    pytest.mark.skipif(bool(MISSING), reason=f"missing here: {', '.join(MISSING)}"),
]


class Nodes:
    def __init__(self, out: Path) -> None:
        tag = f"t{os.getpid() % 10000}"  # veth names: at most 15 characters
        self.name, self.state, self.out = tag, Path(f"/tmp/ss2n-{tag}"), out
        self.net = f"10.{78 + os.getpid() % 100}.{os.getpid() % 250}"
        self.env = {
            **os.environ,
            "TWO_NODES_NAME": tag,
            "TWO_NODES_STATE": str(self.state),
            "TWO_NODES_NET": self.net,
            "TWO_NODES_SHM": "64m",
            "PYTHON": sys.executable,
            "OUT_DIR": str(out),
        }

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def holder(self, node: str) -> int:
        return int((self.state / node / "pid").read_text())


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    made = Nodes(tmp_path / "out")
    setup = made.run("setup")
    assert setup.returncode == 0, setup.stderr
    try:
        yield made
    finally:
        made.run("teardown")


def ns(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def test_each_node_has_its_own_network_ipc_and_shm(nodes: Nodes) -> None:
    head, worker = nodes.holder("head"), nodes.holder("worker")
    for kind in ("net", "ipc", "mnt"):
        assert len({ns(head, kind), ns(worker, kind), ns("self", kind)}) == 3, kind
    assert nodes.run("exec", "head", "touch", "/dev/shm/only-head").returncode == 0
    seen = nodes.run("exec", "worker", "ls", "/dev/shm")
    assert seen.returncode == 0 and "only-head" not in seen.stdout
    assert not Path("/dev/shm/only-head").exists()
    addr = nodes.run("exec", "worker", "ip", "-br", "addr")
    assert re.search(rf"^{nodes.name}0\S*\s+UP\s+{nodes.net}\.2/24", addr.stdout, re.M), addr.stdout


def test_every_node_environment_keeps_multicast_off(nodes: Nodes) -> None:
    env = dict(
        line.split("=", 1) for line in nodes.run("exec", "head", "env").stdout.splitlines()
        if "=" in line
    )  # fmt: skip
    assert (env["NCCL_NVLS_ENABLE"], env["TORCH_SYMM_MEM_DISABLE_MULTICAST"]) == ("0", "1")
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == f"{nodes.name}0"
    copied = env["VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"].split(",")
    assert {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"} <= set(copied)


def test_teardown_leaves_no_namespace_veth_or_process(tmp_path: Path) -> None:
    made = Nodes(tmp_path / "out")
    assert made.run("setup").returncode == 0
    holders = {made.holder("head"), made.holder("worker")}
    namespaces = {ns(pid, "net") for pid in holders}
    sleeper = subprocess.Popen(
        ["bash", str(SCRIPT), "exec", "worker", "bash", "-c", "trap '' TERM; sleep 300"],
        env=made.env,
    )  # a process of the node's own that ignores SIGTERM: teardown must end it too
    time.sleep(1)
    teardown = made.run("teardown")
    assert teardown.returncode == 0, teardown.stderr
    assert sleeper.wait(timeout=30) != 0
    assert not any(_running(pid) for pid in holders)
    left = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and _net(pid) in namespaces
    ]  # fmt: skip
    assert left == []
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert made.name + "-" not in links
    assert not made.state.exists()


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's parent, PID 1 here, may reap it later)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _net(pid: str) -> str | None:
    try:
        return ns(pid, "net")
    except OSError:
        return None


def test_the_link_probe_measures_the_veth(nodes: Nodes) -> None:
    nodes.env.update(PROBE_MAX_BYTES="32M", PROBE_ITERS="7")
    probe = nodes.run("probe", timeout=120)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert f"link (gloo, 2 ranks via {nodes.net}.1)" in probe.stdout
    assert re.search(r"^planner flags: --node-link-gbs \S+ --node-link-latency-us \S+$",
                     probe.stdout, re.M)  # fmt: skip
    assert (nodes.out / "link_probe.json").is_file()


@pytest.mark.ray
def test_the_worker_joins_over_the_veth_and_leaves_when_the_head_dies(nodes: Nodes) -> None:
    join = nodes.run("cpu-join", timeout=400)
    summary = (nodes.out / "summary.txt").read_text()
    assert join.returncode == 0, summary + join.stderr
    assert f'"address": "{nodes.net}.2"' in (nodes.out / "ray_nodes.json").read_text()
    (off,) = re.findall(
        r"NVLink multicast off in (\d+) of (\d+) processes in the nodes \(", summary
    )
    assert off[0] == off[1] and int(off[1]) >= 4, summary  # raylets, GCS, the entrypoint
    assert "worker entrypoint exit code 3" in summary
    assert "error: Ray exited (exit code 1): the head went away" in summary


def test_a_bad_command_exits_2() -> None:
    usage = subprocess.run(["bash", str(SCRIPT), "nonsense"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    env = {**os.environ, "TWO_NODES_STATE": "/tmp/ss2n-never-made"}
    lone = subprocess.run(["bash", str(SCRIPT), "exec", "head", "true"], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert lone.returncode == 2 and "node head is not set up" in lone.stderr


DEBS = SCRIPT.parents[1] / "run" / "iproute2"


@pytest.mark.skipif(
    not list(DEBS.glob("iproute2_*.deb")),
    reason="no run/iproute2/*.deb (bash tools/fetch_iproute2.sh fills it)",
)
def test_the_unpacked_iproute2_sets_up_the_link(tmp_path: Path) -> None:
    made = Nodes(tmp_path / "out")
    made.env["TWO_NODES_UNPACKED_IP"] = "1"
    try:
        assert made.run("setup").returncode == 0
        assert (made.state / "iproute2" / "bin" / "ip").exists()  # the unpacked one ran
        status = made.run("status").stdout
        assert f"{made.net}.1/24" in status and f"{made.net}.2/24" in status
    finally:
        assert made.run("teardown").returncode == 0
    assert not made.state.exists()
