"""Two vLLM containers behind one gateway: the shared stack scaled by compose.replicas.yaml
(`make up-cpu COMPOSE_EXTRA="-f compose.replicas.yaml"`), as a user does it.

The same agent workload as the in-process replica test (tests/agent_sessions.py) runs
through the gateway with round-robin routing, then with prefix affinity, each replica's KV
pool holding about half of the agent sessions' contexts; the share of prompt tokens served from
vLLM's cache is printed side by side. Then one container's vLLM is killed under a wave of
streams: only what was in flight on it fails, and once its container is back its sessions
return to it. Runs after test_stack.py, on its stack (tests/docker/conftest.py).
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agent_sessions import KV_BYTES, Session, pick_sessions, wave
from tests.docker import faults
from tests.docker import stack as st

pytestmark = pytest.mark.docker

NAMES = ("vllm-1", "vllm-2")
SPLIT = {"vllm-1": 5, "vllm-2": 4}  # odd total: round-robin alternates each agent session's turns
TURNS = 4
KILL_WAVE_TOKENS = 1500  # streams of several seconds, so the kill lands inside them
KILL_AFTER_S = 3.0
RETURN_WAVES = 3
# The workload's sizes: a small KV pool per replica, and the gateway's per-key limits
# of test_stack.py lifted (nine agent sessions of one key at once).
WORKLOAD = {
    "SPARKSERVE_KV_CACHE_MEMORY_BYTES": str(KV_BYTES),
    "SPARKSERVE_MAX_NUM_SEQS": "16",
    "GATEWAY_MAX_CONCURRENCY_PER_KEY": "64",
    "GATEWAY_QUEUE_SIZE": "64",
}


def _up(stack: st.Stack, routing: str) -> float:
    """make up-cpu with the replicas override and GATEWAY_ROUTING=routing; seconds taken."""
    st.set_env_lines({**WORKLOAD, "GATEWAY_ROUTING": routing})
    env = {**stack.env, "COMPOSE_EXTRA": "-f compose.replicas.yaml"}
    started = time.monotonic()
    result = st.make("up-cpu", env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return time.monotonic() - started


@pytest.fixture(scope="module")
def scaled(stack: st.Stack) -> st.Stack:
    seconds = _up(stack, "round_robin")
    st.note_timing(f"scaled to two vLLM containers (round-robin gateway): {seconds:.0f} s")
    return stack


def _gateway_sample(stack: st.Stack, name: str, **labels: str) -> float:
    text = httpx.get(f"{stack.gateway}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def _cache_counters(stack: st.Stack) -> tuple[float, float]:
    cached = _gateway_sample(stack, "gateway_cached_prompt_tokens_total", tenant="alice")
    prompt = _gateway_sample(stack, "gateway_prompt_tokens_total", tenant="alice")
    return cached, prompt


def _settle(stack: st.Stack) -> None:
    """Until the gateway has counted every request of the last wave."""
    deadline = time.monotonic() + 10
    while any(_gateway_sample(stack, "gateway_upstream_in_flight", replica=n) for n in NAMES):
        assert time.monotonic() < deadline, "requests still in flight 10 s after the wave"
        time.sleep(0.05)


def _share_of_cached_tokens(stack: st.Stack, seeds: list[str]) -> float:
    sessions = [Session(seed, model=st.SERVED_MODEL) for seed in seeds]
    cached_before, prompt_before = _cache_counters(stack)
    for turn in range(TURNS):
        ok = wave(stack.gateway, stack.key, sessions, turn, max_tokens=4, stream=False)
        assert all(ok), f"turn {turn}: {ok}"
    _settle(stack)
    cached, prompt = _cache_counters(stack)
    return (cached - cached_before) / (prompt - prompt_before)


def _salt_secret(stack: st.Stack) -> bytes:
    return (
        st.compose(
            stack.env, "exec", "-T", "gateway", "cat", "/var/lib/sparkserve-gateway/salt_secret"
        )
        .stdout.strip()
        .encode()
    )


def test_prometheus_scrapes_each_replica(scaled: st.Stack) -> None:
    deadline = time.monotonic() + 90
    while True:
        targets = httpx.get(f"{scaled.prometheus}/api/v1/targets", timeout=30).json()
        vllm = [t for t in targets["data"]["activeTargets"] if t["labels"]["job"] == "vllm"]
        if len(vllm) == 2 and all(t["health"] == "up" for t in vllm):
            break
        assert time.monotonic() < deadline, vllm
        time.sleep(2)


def test_affinity_keeps_more_of_the_cache_than_round_robin(scaled: st.Stack) -> None:
    seeds = [seed for seed, _ in pick_sessions(_salt_secret(scaled), "alice", SPLIT, "s")]
    rr_share = _share_of_cached_tokens(scaled, [f"rr-{seed}" for seed in seeds])
    seconds = _up(scaled, "affinity")
    affinity_share = _share_of_cached_tokens(scaled, seeds)
    st.note_timing(
        f"two vLLM containers, {len(seeds)} agent sessions x {TURNS} turns, share of prompt tokens "
        f"from vLLM's cache: affinity {affinity_share:.1%}, round-robin {rr_share:.1%}"
        + (f" ({affinity_share / rr_share:.2f}x)" if rr_share else "")
        + f"; gateway switched to affinity in {seconds:.0f} s"
    )
    assert affinity_share > rr_share


def _served_by(stack: st.Stack, replica: str) -> float:
    return _gateway_sample(stack, "gateway_upstream_requests_total", replica=replica, outcome="ok")


def _waves_on(stack: st.Stack, replica: str, sessions: list[Session], turn: int) -> list[float]:
    """Waves of short requests, each once `replica` is healthy in the gateway, until one
    has each of its sessions served there; how many it served in each wave (a busy
    2-core machine can make a /health time out and send an agent session elsewhere, correctly)."""
    expected = SPLIT[replica]
    served: list[float] = []
    for _ in range(RETURN_WAVES):
        deadline = time.monotonic() + 120
        while _gateway_sample(stack, "gateway_upstream_healthy", replica=replica) != 1:
            assert time.monotonic() < deadline, f"{replica} not healthy in the gateway"
            time.sleep(0.5)
        _settle(stack)
        before = _served_by(stack, replica)
        assert all(wave(stack.gateway, stack.key, sessions, turn, max_tokens=4, stream=False))
        _settle(stack)
        served.append(_served_by(stack, replica) - before)
        if served[-1] == expected:
            break
    return served


def _in_flight(stack: st.Stack, replica: str) -> float:
    return _gateway_sample(stack, "gateway_upstream_in_flight", replica=replica)


def test_a_killed_container_fails_only_its_own_requests_then_serves_again(
    scaled: st.Stack,
) -> None:
    """(Needs the affinity gateway of the test before.)"""
    picked = pick_sessions(_salt_secret(scaled), "alice", SPLIT, "k")
    sessions = [Session(seed, model=st.SERVED_MODEL) for seed, _ in picked]
    on_victim = [name == "vllm-2" for _, name in picked]
    before = _waves_on(scaled, "vllm-2", sessions, 0)
    assert before[-1] == SPLIT["vllm-2"], before
    restarts = faults.restart_count(scaled.env, index=2)
    main = faults.find(scaled.env, "-m vllm.entrypoints", index=2)  # vLLM's API server
    results: list[bool] = []
    streams = threading.Thread(
        target=lambda: results.extend(
            wave(scaled.gateway, scaled.key, sessions, 1, max_tokens=KILL_WAVE_TOKENS, stream=True)
        )
    )
    # Scheduled now, while the machine is idle (under the wave a `docker exec` can take
    # longer than the streams last): it lands while vllm-2's streams run.
    faults.send_later(scaled.env, "KILL", main, KILL_AFTER_S, index=2)
    streams.start()
    deadline = time.monotonic() + 60
    while _in_flight(scaled, "vllm-2") < 1:
        assert time.monotonic() < deadline, "none of vllm-2's agent sessions in flight on it"
        assert streams.is_alive(), results
        time.sleep(0.02)
    on_victim_now = _in_flight(scaled, "vllm-2")
    streams.join(300)
    failed = results.count(False)
    # Only vllm-2's agent sessions fail (those on it when it died); vllm-1's all complete.
    assert 1 <= failed <= SPLIT["vllm-2"], (results, on_victim_now)
    assert all(ok for ok, victim in zip(results, on_victim, strict=True) if not victim), results
    returned = _waves_on(scaled, "vllm-2", sessions, 2)
    assert faults.restart_count(scaled.env, index=2) == restarts + 1
    assert returned[-1] == SPLIT["vllm-2"], returned
    st.note_timing(
        f"vllm-2 killed {KILL_AFTER_S:g} s into a wave of {len(sessions)} streams "
        f"({on_victim_now:.0f} seen in flight on it): "
        f"{failed} failed, vllm-1's all completed; vllm-2's agent sessions served by it again, "
        f"wave by wave: {returned}"
    )
