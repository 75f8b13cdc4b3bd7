"""The spellings of the cluster link's settings, parsed without looking at the node.

NCCL_SOCKET_IFNAME and NCCL_IB_HCA share one syntax (NCCL's "Environment Variables"
page): a comma list of name prefixes; `^` first excludes them instead, `=` first
matches whole names; NCCL_IB_HCA's entries may name a port (`mlx5_0:1`). Gloo's
GLOO_SOCKET_IFNAME is a comma list of whole interface names (PyTorch's
"Distributed communication package" page). node_check.py matches them against the node.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

IFNAMSIZ = 16  # linux/if.h: an interface name is at most 15 bytes and its NUL
_NAME = re.compile(r"[^\s/,:=^]+")


@dataclass(frozen=True)
class Entry:
    name: str
    port: int | None = None

    def shown(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


@dataclass(frozen=True)
class NcclList:
    """One NCCL name list: which entries, and whether they exclude or match whole names."""

    entries: tuple[Entry, ...]
    exclude: bool = False
    exact: bool = False

    def matches(self, entry: Entry, present: str) -> bool:
        return present == entry.name if self.exact else present.startswith(entry.name)

    def selects(self, present: str) -> bool:
        """Whether NCCL would use the interface or HCA `present` under this list."""
        hit = any(self.matches(entry, present) for entry in self.entries)
        return hit != self.exclude


def _name(raw: str, what: str) -> str:
    if not _NAME.fullmatch(raw) or raw in (".", "..") or len(raw) >= IFNAMSIZ:
        raise ValueError(
            f"{raw!r} is not {what} (at most {IFNAMSIZ - 1} characters, no spaces, "
            "'/', ',', ':', '=' or '^')"
        )
    return raw


def _entry(raw: str, ports: bool) -> Entry:
    name, colon, port = raw.partition(":")
    if not colon:
        return Entry(_name(name, "an HCA name" if ports else "an interface name"))
    if not ports:
        raise ValueError(f"{raw!r}: an interface name has no ':port' part")
    if not port.isdigit() or int(port) < 1:
        raise ValueError(f"{raw!r}: the port after ':' must be a whole number ≥ 1 (mlx5_0:1)")
    return Entry(_name(name, "an HCA name"), int(port))


def parse_nccl_list(raw: str, ports: bool = False) -> NcclList:
    """`eth`, `=eth0,eth1`, `^docker`, `^=docker0`; with `ports`, `mlx5_0:1,mlx5_1`."""
    value = raw.strip()
    exclude = value.startswith("^")
    value = value.removeprefix("^")
    exact = value.startswith("=")
    value = value.removeprefix("=")
    words = value.split(",")
    if not value or any(not word.strip() for word in words):
        raise ValueError("must be a comma list of names, after an optional ^ (exclude), = (exact)")
    return NcclList(tuple(_entry(word.strip(), ports) for word in words), exclude, exact)


def parse_gloo_list(raw: str) -> tuple[str, ...]:
    """`enp1s0f1np1` or `eth0,eth1`: whole interface names."""
    words = raw.strip().split(",")
    if any(not word.strip() for word in words):
        raise ValueError("must be a comma list of interface names (eth0,eth1)")
    return tuple(_name(word.strip(), "an interface name") for word in words)


def nccl_ifname(raw: str) -> str:
    parse_nccl_list(raw)
    return raw.strip()


def nccl_hca(raw: str) -> str:
    parse_nccl_list(raw, ports=True)
    return raw.strip()


def gloo_ifname(raw: str) -> str:
    return ",".join(parse_gloo_list(raw))


def ip_address(raw: str) -> str:
    """An IPv4 or IPv6 address, as Python's ipaddress writes it."""
    try:
        return str(ipaddress.ip_address(raw.strip()))
    except ValueError:
        raise ValueError("must be an IPv4 or IPv6 address (e.g. 192.168.100.10)") from None
