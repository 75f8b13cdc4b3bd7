"""The multi-node settings: this node's role in a Ray cluster and its interconnect
(the node count and the pipeline split are planner settings, `budget.options`).

Declared like every other option (see config.Option); `config.OPTIONS` lists them
after the serving settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from budget import parsers

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
            "More `ray start` flags, shell words (e.g. --node-ip-address 10.0.0.1).",
            "ARGS",
        ),
        option(
            "nccl_socket_ifname",
            parsers.text,
            None,
            "NCCL_SOCKET_IFNAME for Ray and vLLM: the cluster link's interface. Unset: NCCL's.",
            "IFACE",
        ),
        option(
            "gloo_socket_ifname",
            parsers.text,
            None,
            "GLOO_SOCKET_IFNAME for Ray and vLLM. Unset: Gloo's choice.",
            "IFACE",
        ),
        option(
            "node_wait_timeout",
            parsers.positive_seconds,
            600.0,
            "head: seconds to wait for every node and GPU to join Ray (exit 3 after).",
            "SECONDS",
        ),
    )
