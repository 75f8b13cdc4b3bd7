"""The multi-node settings: this node's role in a Ray cluster and its interconnect
(the node count and the pipeline split are planner settings, `budget.options`).

Each field is declared like `PlanOptions`'s (`budget.options.declare`: its
`SPARKSERVE_<NAME>` variable, `--<name>` flag and help); `config.EntrypointConfig`
takes them on after the serving settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from budget import parsers
from budget.options import declare
from entrypoint import link_names

ROLES = ("single", "head", "worker")
DEFAULT_RAY_PORT = 6379  # `ray start --head`'s own default GCS port


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    role: str = field(
        default="single",
        metadata=declare(
            parsers.choice(ROLES),
            "single: one node. head: start Ray, wait for the workers, then serve. "
            "worker: join the head's Ray and stay in the foreground.",
            "|".join(ROLES),
        ),
    )
    head_address: str | None = field(
        default=None,
        metadata=declare(
            parsers.text, "worker: the head's address (IP or name) on the cluster link.", "ADDR"
        ),
    )
    ray_port: int = field(
        default=DEFAULT_RAY_PORT,
        metadata=declare(
            parsers.port, "Ray's GCS port on the head (head: listens, worker: joins).", "PORT"
        ),
    )
    ray_extra_args: tuple[str, ...] = field(
        default=(),
        metadata=declare(
            parsers.argv_words, "More `ray start` flags, shell words (e.g. --num-cpus 1).", "ARGS"
        ),
    )
    # The node's address and interconnect; each is checked against the node at start.
    node_ip: str | None = field(
        default=None,
        metadata=declare(
            link_names.ip_address,
            "This node's address on the cluster link: Ray's --node-ip-address and vLLM's "
            "VLLM_HOST_IP (must be an address of this node). Unset: Ray's and vLLM's guess.",
            "ADDR",
        ),
    )
    nccl_socket_ifname: str | None = field(
        default=None,
        metadata=declare(
            link_names.nccl_ifname,
            "NCCL_SOCKET_IFNAME for Ray and vLLM: the cluster link's interface (NCCL's "
            "syntax: prefix, =exact, ^exclude; must match an interface here). Unset: NCCL's.",
            "IFACE",
        ),
    )
    gloo_socket_ifname: str | None = field(
        default=None,
        metadata=declare(
            link_names.gloo_ifname,
            "GLOO_SOCKET_IFNAME for Ray and vLLM (interface names of this node). "
            "Unset: Gloo's choice.",
            "IFACE",
        ),
    )
    nccl_ib_hca: str | None = field(
        default=None,
        metadata=declare(
            link_names.nccl_hca,
            "NCCL_IB_HCA for Ray and vLLM: the RDMA device (and port) of the link, e.g. "
            "mlx5_0:1 (must be under /sys/class/infiniband). Unset: NCCL uses every one.",
            "HCA[:PORT]",
        ),
    )
    nccl_ib_gid_index: int | None = field(
        default=None,
        metadata=declare(
            parsers.non_negative_int,
            "NCCL_IB_GID_INDEX for Ray and vLLM: the RoCE GID of the link's address (must be "
            "set on every port NCCL_IB_HCA selects). Unset: NCCL's choice.",
            "INDEX",
        ),
    )
    ray_object_store_memory: int | None = field(
        default=None,
        metadata=declare(
            parsers.byte_size,
            "`ray start --object-store-memory`: the ceiling of Ray's object store in "
            "/dev/shm. Unset: 1 GiB on a unified-memory GPU node, else Ray's default "
            "(0.3 of the memory free at start).",
            "BYTES",
        ),
    )
    node_wait_timeout: float = field(
        default=600.0,
        metadata=declare(
            parsers.positive_seconds,
            "head: seconds to wait for every node and GPU to join Ray (exit 3 after).",
            "SECONDS",
        ),
    )
