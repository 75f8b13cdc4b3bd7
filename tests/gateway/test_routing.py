"""The replica router (pure): affinity keys, rendezvous ranking, fallbacks, round-robin."""

from __future__ import annotations

from collections import Counter

from gateway.core.routing import ReplicaState, affinity_key, candidates, rendezvous_rank

CHAT = "/v1/chat/completions"
NAMES = ["0", "1"]


def _chat(system: str, *turns: str, salt: str = "s1", tools: list[str] | None = None) -> dict:
    messages = [{"role": "system", "content": system}]
    messages += [{"role": "user", "content": turn} for turn in turns]
    body: dict = {"messages": messages, "cache_salt": salt}
    if tools is not None:
        body["tools"] = [{"type": "function", "function": {"name": t}} for t in tools]
    return body


def _replicas(*states: tuple[bool, int]) -> list[ReplicaState]:
    return [ReplicaState(str(i), healthy, n) for i, (healthy, n) in enumerate(states)]


def _first(replicas: list[ReplicaState], key: bytes | None, **kw: object) -> int:
    options = {"routing": "affinity", "max_in_flight": 4, **kw}
    return candidates(replicas, key, **options)[0]  # type: ignore[arg-type]


def test_key_is_the_stable_prefix_not_the_history() -> None:
    first = affinity_key(CHAT, _chat("agent", "task one"))
    later = affinity_key(CHAT, _chat("agent", "task one", "and more", "and more"))
    assert first == later
    assert first != affinity_key(CHAT, _chat("agent", "task one", salt="s2"))
    assert first != affinity_key(CHAT, _chat("agent", "task one", tools=["grep"]))
    assert first != affinity_key(CHAT, _chat("other agent", "task one"))


def test_keys_for_other_routes() -> None:
    assert affinity_key("/v1/completions", {"prompt": "abc", "cache_salt": "s"}) is not None
    assert affinity_key("/v1/completions", {"prompt": [1, 2, 3]}) is None
    assert affinity_key("/v1/embeddings", {"input": "abc"}) is None
    odd = {"messages": [{"role": ["system"]}, "x"], "tools": {"a": 1}}
    assert affinity_key(CHAT, odd) is not None  # any JSON shape hashes


def test_rendezvous_moves_only_the_keys_of_a_removed_replica() -> None:
    keys = [bytes([i, j]) for i in range(16) for j in range(16)]
    three = {k: ["a", "b", "c"][rendezvous_rank(k, ["a", "b", "c"])[0]] for k in keys}
    two = {k: ["a", "b"][rendezvous_rank(k, ["a", "b"])[0]] for k in keys}
    assert all(two[k] == three[k] for k in keys if three[k] != "c")
    assert min(Counter(three.values()).values()) > len(keys) / 5  # spread over all three


def test_affinity_choice_is_stable_and_spreads_sessions() -> None:
    replicas = _replicas((True, 0), (True, 0))
    keys = [affinity_key(CHAT, _chat(f"session {i}")) for i in range(200)]
    firsts = [_first(replicas, k) for k in keys]
    assert firsts == [_first(replicas, k) for k in keys]
    assert min(Counter(firsts).values()) > 60


def test_unhealthy_or_busy_preferred_replica_falls_back_to_least_loaded() -> None:
    key = affinity_key(CHAT, _chat("agent"))
    preferred = rendezvous_rank(key, NAMES)[0]  # type: ignore[arg-type]
    other = 1 - preferred
    states = [(True, 0), (True, 0)]
    states[preferred] = (False, 0)
    assert _first(_replicas(*states), key) == other
    states[preferred] = (True, 4)  # at the bound
    states[other] = (True, 1)
    assert _first(_replicas(*states), key) == other
    states[preferred] = (True, 3)  # under it: affinity wins over load
    assert _first(_replicas(*states), key) == preferred


def test_shared_system_prompt_spills_past_the_bound() -> None:
    key = affinity_key(CHAT, _chat("the one agent prompt"))
    load = [0, 0]
    for _ in range(12):  # twelve concurrent chat sessions of one prompt, bound 4
        chosen = _first([ReplicaState(n, True, load[i]) for i, n in enumerate(NAMES)], key)
        load[chosen] += 1
    assert load == [6, 6]  # four on the preferred one, then the least loaded each time


def test_all_unhealthy_are_still_tried_and_order_lists_every_replica() -> None:
    replicas = _replicas((False, 0), (False, 2))
    assert sorted(candidates(replicas, None, routing="affinity", max_in_flight=4)) == [0, 1]
    mixed = candidates(_replicas((False, 0), (True, 9)), b"k", routing="affinity", max_in_flight=4)
    assert mixed == [1, 0]


def test_round_robin_cycles_through_healthy_replicas() -> None:
    replicas = _replicas((True, 0), (True, 0), (True, 0))
    key = b"same prefix"
    turns = [
        candidates(replicas, key, routing="round_robin", max_in_flight=4, turn=t)[0]
        for t in range(6)
    ]
    assert turns == [0, 1, 2, 0, 1, 2]
    replicas = _replicas((True, 0), (False, 0), (True, 0))
    turns = [
        candidates(replicas, key, routing="round_robin", max_in_flight=4, turn=t)[0]
        for t in range(3)
    ]
    assert 1 not in turns


def test_requests_without_a_key_go_to_the_least_loaded() -> None:
    assert _first(_replicas((True, 5), (True, 2)), None) == 1
