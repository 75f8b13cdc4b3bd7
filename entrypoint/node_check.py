"""The cluster link's settings checked against this node before Ray or vLLM starts.

A name NCCL, Gloo or Ray cannot find on the node does not fail at once: Ray binds
another interface (eugr/spark-vllm-docker#227), NCCL falls back to sockets, or the
first collective hangs minutes later. Each check here fails with the names the node
does have: interfaces and addresses from psutil.net_if_addrs, RDMA devices, ports and
GIDs from sysfs (/sys/class/infiniband/<hca>/ports/<port>/gids/<index>).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import psutil

from entrypoint.config import EntrypointConfig
from entrypoint.errors import PreflightError
from entrypoint.link_names import Entry, NcclList, parse_gloo_list, parse_nccl_list

IB_ROOT = Path("/sys/class/infiniband")
UNSET_GID = "0000:0000:0000:0000:0000:0000:0000:0000"  # a GID table slot nobody filled
IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class Address(Protocol):
    @property
    def family(self) -> int: ...
    @property
    def address(self) -> str: ...


Interfaces = Mapping[str, Sequence[Address]]


def node_interfaces() -> Interfaces:
    return psutil.net_if_addrs()


def _listing(names: Sequence[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def check_nccl_ifname(value: str, present: Sequence[str]) -> None:
    wanted = parse_nccl_list(value)
    if wanted.exclude:
        if not [name for name in present if wanted.selects(name)]:
            raise PreflightError(
                f"SPARKSERVE_NCCL_SOCKET_IFNAME={value} leaves NCCL no interface on this "
                f"node; interfaces here: {_listing(present)}"
            )
        return
    how = "named" if wanted.exact else "starting with"
    for entry in wanted.entries:
        if not any(wanted.matches(entry, name) for name in present):
            raise PreflightError(
                f"SPARKSERVE_NCCL_SOCKET_IFNAME={value}: no interface {how} {entry.name!r} "
                f"on this node; interfaces here: {_listing(present)}"
            )


def check_gloo_ifname(value: str, present: Sequence[str]) -> None:
    for name in parse_gloo_list(value):
        if name not in present:
            raise PreflightError(
                f"SPARKSERVE_GLOO_SOCKET_IFNAME={value}: no interface {name!r} on this node; "
                f"interfaces here: {_listing(present)}"
            )


def node_addresses(interfaces: Interfaces) -> dict[str, str]:
    """Each IP address of the node (IPv6 without its %scope) → its interface."""
    found = {}
    for name, addresses in interfaces.items():
        for address in addresses:
            if address.family in IP_FAMILIES:
                found[str(ipaddress.ip_address(address.address.split("%")[0]))] = name
    return found


def check_node_ip(value: str, interfaces: Interfaces) -> None:
    found = node_addresses(interfaces)
    if value not in found:
        shown = ", ".join(f"{ip} ({name})" for ip, name in sorted(found.items())) or "none"
        raise PreflightError(
            f"SPARKSERVE_NODE_IP={value} is not an address of this node; its addresses: {shown}"
        )


def _children(path: Path) -> list[str]:
    return sorted(child.name for child in path.iterdir()) if path.is_dir() else []


def selected_ports(
    hcas: NcclList | None, root: Path, setting: str, value: str
) -> list[tuple[str, str]]:
    """(HCA, port) pairs NCCL would use: those the list names, or every one when unset."""
    present = _children(root)
    if not present:
        raise PreflightError(
            f"{setting}={value}: this node has no RDMA device (nothing under {root})"
        )
    if hcas is None or hcas.exclude:
        chosen = [hca for hca in present if hcas is None or hcas.selects(hca)]
        pairs = [(hca, port) for hca in chosen for port in _children(root / hca / "ports")]
    else:
        pairs = [p for e in hcas.entries for p in _entry_ports(e, hcas, present, root, value)]
    if not pairs:
        raise PreflightError(
            f"SPARKSERVE_NCCL_IB_HCA={value} leaves NCCL no RDMA port; "
            f"RDMA devices here: {_listing(present)}"
        )
    return pairs


def _entry_ports(
    entry: Entry, hcas: NcclList, present: Sequence[str], root: Path, value: str
) -> list[tuple[str, str]]:
    matched = [hca for hca in present if hcas.matches(entry, hca)]
    if not matched:
        how = "named" if hcas.exact else "starting with"
        raise PreflightError(
            f"SPARKSERVE_NCCL_IB_HCA={value}: no RDMA device {how} {entry.name!r} under "
            f"{root}; RDMA devices here: {_listing(present)}"
        )
    if entry.port is None:
        return [(hca, port) for hca in matched for port in _children(root / hca / "ports")]
    for hca in matched:
        ports = _children(root / hca / "ports")
        if str(entry.port) not in ports:
            raise PreflightError(
                f"SPARKSERVE_NCCL_IB_HCA={value}: {hca} has no port {entry.port}; "
                f"its ports: {_listing(ports)}"
            )
    return [(hca, str(entry.port)) for hca in matched]


def set_gids(gids: Path) -> list[str]:
    """The indices of a port's GID table that hold a GID."""
    filled = []
    for index in _children(gids):
        try:
            if (gids / index).read_text().strip() != UNSET_GID:
                filled.append(index)
        except OSError:
            continue  # the kernel refuses to read some unused slots
    return sorted(filled, key=int)


def check_gid_index(index: int, pairs: Sequence[tuple[str, str]], root: Path) -> None:
    for hca, port in pairs:
        present = set_gids(root / hca / "ports" / port / "gids")
        if str(index) not in present:
            raise PreflightError(
                f"SPARKSERVE_NCCL_IB_GID_INDEX={index}: {hca} port {port} has no GID {index} "
                f"({root}/{hca}/ports/{port}/gids); GIDs set there: "
                f"{', '.join(present) or 'none'}"
            )


def check_rdma(config: EntrypointConfig, root: Path) -> None:
    hca, index = config.nccl_ib_hca, config.nccl_ib_gid_index
    if hca is None and index is None:
        return
    setting, value = (
        ("SPARKSERVE_NCCL_IB_HCA", hca) if hca else ("SPARKSERVE_NCCL_IB_GID_INDEX", str(index))
    )
    wanted = parse_nccl_list(hca, ports=True) if hca else None
    pairs = selected_ports(wanted, root, setting, value)
    if index is not None:
        check_gid_index(index, pairs, root)


def check_node(
    config: EntrypointConfig,
    interfaces: Callable[[], Interfaces] = node_interfaces,
    ib_root: Path = IB_ROOT,
) -> None:
    """Every link setting that is set names something this node has (PreflightError)."""
    found = interfaces()
    if config.node_ip:
        check_node_ip(config.node_ip, found)
    if config.nccl_socket_ifname:
        check_nccl_ifname(config.nccl_socket_ifname, list(found))
    if config.gloo_socket_ifname:
        check_gloo_ifname(config.gloo_socket_ifname, list(found))
    check_rdma(config, ib_root)
