"""Choosing a replica for a request: pure functions, no I/O, no clock.

Affinity: a request's key is a hash of its stable prefix after layout (the
tenant's cache salt, the leading system/developer messages, the tools), so
every request of a chat session lands where its prefix is already cached.  The key
picks a replica by rendezvous hashing (highest `hash(key, replica name)`), which
moves only the keys of a replica that leaves or returns.  When that replica is
unhealthy or has `max_in_flight` requests or more, the request goes to the
least-loaded healthy replica instead (so one system prompt shared by every
chat session cannot make a hotspot).  Round-robin (for comparison) cycles through
the healthy replicas.  Requests without a key go to the least-loaded one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.core.jsoncodec import canonical

Routing = Literal["affinity", "round_robin"]
STABLE_ROLES = ("system", "developer")
# How much of a plain completions prompt counts as its stable prefix.
PROMPT_PREFIX_CHARS = 2048


@dataclass(frozen=True)
class ReplicaState:
    """What the router sees of one replica."""

    name: str
    healthy: bool
    in_flight: int


def _digest(*parts: Any) -> bytes:
    return hashlib.blake2b(canonical(parts), digest_size=16).digest()


def _leading_system(messages: Any) -> list[Any]:
    if not isinstance(messages, list):
        return []
    lead = 0
    while lead < len(messages):
        message = messages[lead]
        if not isinstance(message, dict) or message.get("role") not in STABLE_ROLES:
            break
        lead += 1
    return messages[:lead]


def affinity_key(path: str, body: Mapping[str, Any]) -> bytes | None:
    """The hash of a request body's stable prefix (salt included), or None."""
    salt = body.get("cache_salt")
    if path == "/v1/chat/completions":
        return _digest(salt, _leading_system(body.get("messages")), body.get("tools"))
    if path == "/v1/responses":
        return _digest(salt, body.get("instructions"), body.get("tools"))
    if path == "/v1/completions" and isinstance(body.get("prompt"), str):
        return _digest(salt, body["prompt"][:PROMPT_PREFIX_CHARS])
    return None


def rendezvous_rank(key: bytes, names: Sequence[str]) -> list[int]:
    """Replica indices, best first, for `key` (highest random weight)."""

    def weight(index: int) -> bytes:
        return hashlib.blake2b(key + names[index].encode(), digest_size=8).digest()

    return sorted(range(len(names)), key=weight, reverse=True)


def _least_loaded(replicas: Sequence[ReplicaState], order: Sequence[int]) -> list[int]:
    """Indices by in-flight count; ties keep `order` (the key's preference)."""
    return sorted(order, key=lambda i: replicas[i].in_flight)


def candidates(
    replicas: Sequence[ReplicaState],
    key: bytes | None,
    *,
    routing: Routing,
    max_in_flight: int,
    turn: int = 0,
) -> list[int]:
    """Every replica index in the order to try: the choice first, then the other
    healthy ones least-loaded first, then the unhealthy ones (health is a hint:
    when none is healthy they are still tried, so a recovered replica is found)."""
    count = len(replicas)
    if key is not None and routing == "affinity":
        order = rendezvous_rank(key, [r.name for r in replicas])
    else:
        order = [(turn + i) % count for i in range(count)]
    healthy = [i for i in order if replicas[i].healthy]
    unhealthy = [i for i in order if not replicas[i].healthy]
    if not healthy:
        return unhealthy
    preferred = order[0]
    if routing == "round_robin":
        first = healthy[0]
    elif key is not None and preferred in healthy and replicas[preferred].in_flight < max_in_flight:
        first = preferred
    else:
        first = _least_loaded(replicas, healthy)[0]
    rest = _least_loaded(replicas, [i for i in healthy if i != first])
    return [first, *rest, *unhealthy]
