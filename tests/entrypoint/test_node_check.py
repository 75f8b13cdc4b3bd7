"""The link settings checked against a real node: this machine's interfaces and addresses,
and those of a network namespace holding one end of a veth pair (`ip -j` is the witness)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from entrypoint.config import load_config
from entrypoint.errors import ConfigError, PreflightError
from entrypoint.node_check import IB_ROOT, check_node
from tests.entrypoint.test_cli import run_entrypoint

WORKER = {"SPARKSERVE_ROLE": "worker", "SPARKSERVE_HEAD_ADDRESS": "10.0.0.1"}
NOT_HERE_IP = "203.0.113.7"  # TEST-NET-3 (RFC 5737): on no machine's interface
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and ip"
)


def ip_json(*args: str, netns: str | None = None) -> list[dict]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    done = subprocess.run([*prefix, "ip", "-j", *args], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


def names_here() -> list[str]:
    return sorted(link["ifname"] for link in ip_json("link"))


def addresses_here() -> list[str]:
    return [a["local"] for link in ip_json("addr") for a in link.get("addr_info", [])]


def config(**env: str):
    return load_config({**WORKER, **env})


def test_this_machines_interfaces_and_addresses_pass():
    name = next(n for n in names_here() if n != "lo") if len(names_here()) > 1 else "lo"
    for ip in addresses_here():
        check_node(config(SPARKSERVE_NODE_IP=ip))
    check_node(config(SPARKSERVE_NCCL_SOCKET_IFNAME=f"={name}", SPARKSERVE_GLOO_SOCKET_IFNAME=name))
    check_node(config(SPARKSERVE_NCCL_SOCKET_IFNAME=name[:2]))  # NCCL matches prefixes


def test_an_interface_not_on_this_node_is_refused_with_the_names_present():
    with pytest.raises(PreflightError) as caught:
        check_node(config(SPARKSERVE_NCCL_SOCKET_IFNAME="enp1s0f1np1"))
    assert "no interface starting with 'enp1s0f1np1'" in str(caught.value)
    assert "interfaces here: " + ", ".join(names_here()) in str(caught.value)


def test_nccl_exact_match_refuses_a_prefix_that_would_match():
    with pytest.raises(PreflightError, match="no interface named 'l' on this node"):
        check_node(config(SPARKSERVE_NCCL_SOCKET_IFNAME="=l"))
    check_node(config(SPARKSERVE_NCCL_SOCKET_IFNAME="l"))


def test_gloo_wants_whole_names():
    with pytest.raises(
        PreflightError, match="SPARKSERVE_GLOO_SOCKET_IFNAME=lo,l: no interface 'l'"
    ):
        check_node(config(SPARKSERVE_GLOO_SOCKET_IFNAME="lo,l"))


def test_an_address_not_on_this_node_is_refused_with_the_nodes_addresses():
    with pytest.raises(PreflightError) as caught:
        check_node(config(SPARKSERVE_NODE_IP=NOT_HERE_IP))
    message = str(caught.value)
    assert message.startswith(f"SPARKSERVE_NODE_IP={NOT_HERE_IP} is not an address of this node")
    assert "127.0.0.1 (lo)" in message
    for ip in addresses_here():
        assert ip in message


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SPARKSERVE_NCCL_SOCKET_IFNAME": "eth 0"}, "'eth 0' is not an interface name"),
        ({"SPARKSERVE_NCCL_SOCKET_IFNAME": "^"}, "must be a comma list of names"),
        ({"SPARKSERVE_NCCL_SOCKET_IFNAME": "eth0:1"}, "an interface name has no ':port' part"),
        ({"SPARKSERVE_GLOO_SOCKET_IFNAME": "eth0,,eth1"}, "must be a comma list of interface"),
        ({"SPARKSERVE_GLOO_SOCKET_IFNAME": "a" * 16}, "at most 15 characters"),
        ({"SPARKSERVE_NCCL_IB_HCA": "mlx5_0:x"}, "the port after ':' must be a whole number"),
        ({"SPARKSERVE_NCCL_IB_HCA": "mlx5_0:0"}, "the port after ':' must be a whole number"),
        ({"SPARKSERVE_NCCL_IB_GID_INDEX": "-1"}, "SPARKSERVE_NCCL_IB_GID_INDEX='-1': must be"),
        ({"SPARKSERVE_NCCL_IB_GID_INDEX": "3a"}, "must be an integer ≥ 0"),
        ({"SPARKSERVE_NODE_IP": "10.0.0.256"}, "must be an IPv4 or IPv6 address"),
    ],
)
def test_malformed_link_settings_are_refused_when_read(env, message):
    with pytest.raises(ConfigError, match=message):
        config(**env)


@pytest.mark.skipif(IB_ROOT.exists(), reason="this machine has RDMA devices")
@pytest.mark.parametrize(
    "env", [{"SPARKSERVE_NCCL_IB_HCA": "mlx5_0:1"}, {"SPARKSERVE_NCCL_IB_GID_INDEX": "3"}]
)
def test_rdma_settings_on_a_node_without_rdma_say_there_is_none(env):
    with pytest.raises(PreflightError, match="this node has no RDMA device"):
        check_node(config(**env))


# --- a network namespace: one end of a veth, its own loopback ---------------------------
@dataclass(frozen=True)
class Namespace:
    name: str
    link: str
    address: str


@pytest.fixture
def netns() -> Iterator[Namespace]:
    tag = f"ssnc{os.getpid() % 10000}"
    made = Namespace(tag, f"{tag}b", f"10.213.{os.getpid() % 250}.2")

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", tag)
    try:
        ip("link", "add", f"{tag}a", "type", "veth", "peer", "name", made.link, "netns", tag)
        ip("-n", tag, "addr", "add", f"{made.address}/24", "dev", made.link)
        ip("-n", tag, "link", "set", made.link, "up")
        ip("-n", tag, "link", "set", "lo", "up")
        yield made
    finally:
        subprocess.run(["ip", "link", "del", f"{tag}a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", tag], capture_output=True)


def in_netns(ns: Namespace, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPARKSERVE_")}
    return subprocess.run(
        ["ip", "netns", "exec", ns.name, sys.executable, *args],
        env={**full, **WORKER, **env}, capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).parents[2],
    )  # fmt: skip


CHECK = "from entrypoint.config import load_config; from entrypoint.node_check import check_node;"
CHECK += "import os; check_node(load_config(os.environ)); print('ok')"


@needs_root
def test_in_a_namespace_its_veth_and_address_pass(netns):
    present = sorted(link["ifname"] for link in ip_json("link", netns=netns.name))
    assert present == sorted(["lo", netns.link])
    done = in_netns(
        netns,
        "-c",
        CHECK,
        SPARKSERVE_NODE_IP=netns.address,
        SPARKSERVE_NCCL_SOCKET_IFNAME=f"={netns.link}",
        SPARKSERVE_GLOO_SOCKET_IFNAME=netns.link,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@needs_root
def test_in_a_namespace_the_hosts_interface_exits_2_naming_the_namespaces(netns):
    host_link = next(n for n in names_here() if n != "lo")
    done = in_netns(netns, "-m", "entrypoint", SPARKSERVE_NCCL_SOCKET_IFNAME=f"={host_link}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"sparkserve: error: SPARKSERVE_NCCL_SOCKET_IFNAME=={host_link}: no interface named "
        f"{host_link!r} on this node; interfaces here: {', '.join(sorted(['lo', netns.link]))}"
    ]


@needs_root
def test_in_a_namespace_excluding_everything_but_loopback_leaves_nccl_nothing(netns):
    done = in_netns(netns, "-m", "entrypoint", SPARKSERVE_NCCL_SOCKET_IFNAME=f"^lo,{netns.link}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"sparkserve: error: SPARKSERVE_NCCL_SOCKET_IFNAME=^lo,{netns.link} leaves NCCL no "
        f"interface on this node; interfaces here: {', '.join(sorted(['lo', netns.link]))}"
    ]


@needs_root
def test_in_a_namespace_the_hosts_address_exits_2_naming_the_namespaces(netns):
    host_ip = next(ip for ip in addresses_here() if not ip.startswith(("127.", "::1", "fe80")))
    done = in_netns(netns, "-m", "entrypoint", SPARKSERVE_NODE_IP=host_ip)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert f"SPARKSERVE_NODE_IP={host_ip} is not an address of this node" in line
    assert f"{netns.address} ({netns.link})" in line and "127.0.0.1 (lo)" in line


def test_the_cli_refuses_a_wrong_interface_before_starting_ray():
    done = run_entrypoint(SPARKSERVE_GLOO_SOCKET_IFNAME="nosuch0", **WORKER)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sparkserve: error: SPARKSERVE_GLOO_SOCKET_IFNAME=nosuch0: no interface 'nosuch0' on "
        "this node; interfaces here: " + ", ".join(names_here())
    ]
    assert "starting Ray" not in done.stdout


def test_the_cli_refuses_a_malformed_gid_index_in_one_line():
    done = run_entrypoint(SPARKSERVE_NCCL_IB_GID_INDEX="three", **WORKER)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sparkserve: error: SPARKSERVE_NCCL_IB_GID_INDEX='three': must be an integer ≥ 0"
    ]


# --- RDMA: a sysfs-shaped tree, since this machine has no RDMA device -------------------
GID_V4 = "0000:0000:0000:0000:0000:ffff:c0a8:640a"  # RoCE v2 GID of 192.168.100.10
NO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@pytest.fixture
def ib_root(tmp_path: Path) -> Path:
    """Two ConnectX-7 ports as two HCAs, one port each; GIDs 0-3 set, 4-7 empty slots."""
    for hca in ("rocep1s0f1", "roceP2p1s0f1"):
        gids = tmp_path / hca / "ports" / "1" / "gids"
        gids.mkdir(parents=True)
        for index in range(8):
            (gids / str(index)).write_text((GID_V4 if index < 4 else NO_GID) + "\n")
    return tmp_path


def rdma(ib_root: Path, **env: str) -> None:
    check_node(config(**env), ib_root=ib_root)


def test_an_hca_and_port_that_exist_with_a_set_gid_pass(ib_root):
    rdma(ib_root, SPARKSERVE_NCCL_IB_HCA="=rocep1s0f1:1", SPARKSERVE_NCCL_IB_GID_INDEX="3")
    rdma(ib_root, SPARKSERVE_NCCL_IB_HCA="roce")  # a prefix: both


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SPARKSERVE_NCCL_IB_HCA": "mlx5_0:1"},
            "SPARKSERVE_NCCL_IB_HCA=mlx5_0:1: no RDMA device starting with 'mlx5_0' under "
            "{root}; RDMA devices here: roceP2p1s0f1, rocep1s0f1",
        ),
        (
            {"SPARKSERVE_NCCL_IB_HCA": "=roce"},
            "SPARKSERVE_NCCL_IB_HCA==roce: no RDMA device named 'roce'",
        ),
        (
            {"SPARKSERVE_NCCL_IB_HCA": "rocep1s0f1:2"},
            "SPARKSERVE_NCCL_IB_HCA=rocep1s0f1:2: rocep1s0f1 has no port 2; its ports: 1",
        ),
        (
            {"SPARKSERVE_NCCL_IB_HCA": "^roce"},
            "SPARKSERVE_NCCL_IB_HCA=^roce leaves NCCL no RDMA port",
        ),
        (
            {"SPARKSERVE_NCCL_IB_HCA": "rocep1s0f1:1", "SPARKSERVE_NCCL_IB_GID_INDEX": "5"},
            "SPARKSERVE_NCCL_IB_GID_INDEX=5: rocep1s0f1 port 1 has no GID 5 "
            "({root}/rocep1s0f1/ports/1/gids); GIDs set there: 0, 1, 2, 3",
        ),
        (
            {"SPARKSERVE_NCCL_IB_GID_INDEX": "300"},
            "SPARKSERVE_NCCL_IB_GID_INDEX=300: roceP2p1s0f1 port 1 has no GID 300",
        ),
    ],
)
def test_rdma_settings_the_node_lacks_are_refused_with_what_it_has(ib_root, env, message):
    with pytest.raises(PreflightError) as caught:
        rdma(ib_root, **env)
    assert str(caught.value).startswith(message.format(root=ib_root))
