"""The multi-node settings: this node's role in a Ray cluster and its interconnect
(the node count and the pipeline split are planner settings, `budget.options`).

Declared like every other option (see config.Option); `config.OPTIONS` lists them
after the serving settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from budget import parsers
from entrypoint import link_names

if TYPE_CHECKING:
    from entrypoint.config import Option

ROLES = ("single", "head", "worker")
DEFAULT_RAY_PORT = 6379  # `ray start --head`'s own default GCS port


def cluster_options(option: type[Option]) -> tuple[Option, ...]:
    return (
        option(
            "role",
            parsers.choice(ROLES),
            "single",
            "single: one node. head: start Ray, wait for the workers, then serve. "
            "worker: join the head's Ray and stay in the foreground.",
            "|".join(ROLES),
        ),
        option(
            "head_address",
            parsers.text,
            None,
            "worker: the head's address (IP or name) on the cluster link.",
            "ADDR",
        ),
        option(
            "ray_port",
            parsers.port,
            DEFAULT_RAY_PORT,
            "Ray's GCS port on the head (head: listens, worker: joins).",
            "PORT",
        ),
        option(
            "ray_extra_args",
            parsers.argv_words,
            (),
            "More `ray start` flags, shell words (e.g. --num-cpus 1).",
            "ARGS",
        ),
        *link_options(option),
        option(
            "node_wait_timeout",
            parsers.positive_seconds,
            600.0,
            "head: seconds to wait for every node and GPU to join Ray (exit 3 after).",
            "SECONDS",
        ),
    )


def link_options(option: type[Option]) -> tuple[Option, ...]:
    """The node's address and interconnect; each is checked against the node at start."""
    return (
        option(
            "node_ip",
            link_names.ip_address,
            None,
            "This node's address on the cluster link: Ray's --node-ip-address and vLLM's "
            "VLLM_HOST_IP (must be an address of this node). Unset: Ray's and vLLM's guess.",
            "ADDR",
        ),
        option(
            "nccl_socket_ifname",
            link_names.nccl_ifname,
            None,
            "NCCL_SOCKET_IFNAME for Ray and vLLM: the cluster link's interface (NCCL's "
            "syntax: prefix, =exact, ^exclude; must match an interface here). Unset: NCCL's.",
            "IFACE",
        ),
        option(
            "gloo_socket_ifname",
            link_names.gloo_ifname,
            None,
            "GLOO_SOCKET_IFNAME for Ray and vLLM (interface names of this node). "
            "Unset: Gloo's choice.",
            "IFACE",
        ),
        option(
            "nccl_ib_hca",
            link_names.nccl_hca,
            None,
            "NCCL_IB_HCA for Ray and vLLM: the RDMA device (and port) of the link, e.g. "
            "mlx5_0:1 (must be under /sys/class/infiniband). Unset: NCCL uses every one.",
            "HCA[:PORT]",
        ),
        option(
            "nccl_ib_gid_index",
            parsers.non_negative_int,
            None,
            "NCCL_IB_GID_INDEX for Ray and vLLM: the RoCE GID of the link's address (must be "
            "set on every port NCCL_IB_HCA selects). Unset: NCCL's choice.",
            "INDEX",
        ),
        option(
            "ray_object_store_memory",
            parsers.byte_size,
            None,
            "`ray start --object-store-memory`: the ceiling of Ray's object store in "
            "/dev/shm. Unset: 1 GiB on a unified-memory GPU node, else Ray's default "
            "(0.3 of the memory free at start).",
            "BYTES",
        ),
    )
