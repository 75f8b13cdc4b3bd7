"""How `/health` answers move a replica in and out of rotation (error paths: a mock
transport stands in for vLLM; the slow-replica case runs over HTTP below)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.core.metrics import GatewayMetrics
from gateway.standalone.replicas import ReplicaSet

Answer = Callable[[httpx.Request], httpx.Response]


def _set(misses: int) -> tuple[ReplicaSet, CollectorRegistry]:
    registry = CollectorRegistry()
    replicas = ReplicaSet(
        ["http://a:1", "http://b:1"],
        ["a", "b"],
        GatewayMetrics.create(registry),
        routing="affinity",
        max_in_flight=32,
        timeout_misses=misses,
    )
    return replicas, registry


def _checks(replicas: ReplicaSet, answers: list[Answer]) -> list[bool]:
    """Check replica b once per answer; what each check said."""
    pending = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        return pending.pop(0)(request)

    async def run() -> list[bool]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return [await replicas.check(client, replicas.replicas[1], 0.5) for _ in answers]

    return asyncio.run(run())


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


def timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def dead(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503)


def _healthy(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("gateway_upstream_healthy", {"replica": "b"})


def test_one_slow_health_answer_is_not_enough(caplog: pytest.LogCaptureFixture) -> None:
    replicas, registry = _set(misses=2)
    with caplog.at_level(logging.INFO, logger="gateway.replicas"):
        assert _checks(replicas, [timeout]) == [True]
    assert replicas.replicas[1].healthy and _healthy(registry) == 1
    assert "/health timed out after 0.5 s (1 of 2 in a row)" in caplog.text
    assert "unhealthy" not in caplog.text


def test_timeouts_in_a_row_mark_it_unhealthy_and_an_answer_resets_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replicas, registry = _set(misses=3)
    assert _checks(replicas, [timeout, timeout, ok, timeout, timeout]) == [True] * 5
    assert _healthy(registry) == 1  # the 200 in between started the count again
    with caplog.at_level(logging.WARNING, logger="gateway.replicas"):
        assert _checks(replicas, [timeout]) == [False]
    assert "replica b is unhealthy: /health timed out 3 times in a row" in caplog.text
    assert not replicas.replicas[1].healthy and _healthy(registry) == 0
    assert replicas.replicas[0].healthy  # a is never touched
    assert _checks(replicas, [ok]) == [True]
    assert _healthy(registry) == 1


@pytest.mark.parametrize(
    ("answer", "why"),
    [(refused, "/health failed (ConnectError)"), (dead, "/health answered 503")],
    ids=["refused", "503"],
)
def test_refused_or_unhealthy_answer_marks_it_at_once(
    answer: Answer, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    replicas, registry = _set(misses=5)
    with caplog.at_level(logging.WARNING, logger="gateway.replicas"):
        assert _checks(replicas, [answer]) == [False]
    assert _healthy(registry) == 0
    assert f"replica b is unhealthy: {why}" in caplog.text


def test_an_unhealthy_replica_stays_out_while_it_times_out() -> None:
    replicas, registry = _set(misses=2)
    assert _checks(replicas, [refused, timeout]) == [False, False]
    assert _healthy(registry) == 0


def test_misses_below_one_refused() -> None:
    with pytest.raises(ValueError, match="timeout_misses must be at least 1, got 0"):
        _set(misses=0)
