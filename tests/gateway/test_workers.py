"""GATEWAY_WORKERS: the parent's shared state, served to workers over a real Unix socket.

Each `Link` here is what one worker process holds; the tests run the parent and
several links on one event loop, so that what crosses the socket is exactly what
crosses it between processes.  The process test starts `python -m gateway` with two
workers in front of the shared vLLM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bench.gateway_bench import wait_ready
from bench.launcher import free_port
from gateway.core.errors import MemoryLow, Overloaded
from gateway.standalone.settings import GatewaySettings
from gateway.standalone.workers import (
    Coordinator,
    Link,
    SharedAdmission,
    SharedDivergence,
    SharedReplicaCounts,
    merge_metrics,
)
from tests.gateway.conftest import MakeSettings

if TYPE_CHECKING:
    from tests.vllm_proc import VLLMServer


class Parent:
    def __init__(self, coordinator: Coordinator, path: Path) -> None:
        self.coordinator = coordinator
        self.path = path
        self.links: list[Link] = []

    async def link(self, registry: CollectorRegistry | None = None) -> Link:
        link = Link(str(self.path), registry)
        link.on_gone = lambda: None
        await link.connect()
        self.links.append(link)
        return link


@contextlib.asynccontextmanager
async def parent(settings: GatewaySettings, tmp_path: Path) -> AsyncIterator[Parent]:
    coordinator = Coordinator(settings)
    path = tmp_path / "coordinator.sock"
    task = asyncio.create_task(coordinator.serve(path))
    while not path.exists():
        await asyncio.sleep(0.01)
    held = Parent(coordinator, path)
    try:
        yield held
    finally:
        for link in held.links:
            await link.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def settle(check: Callable[[], bool]) -> None:
    """Wait until `check()` holds: one-way messages take a turn of each loop."""
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the parent never got there")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_a_key_limit_holds_across_workers_in_queue_order(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    settings = make_settings(max_concurrency_per_key=1, queue_size=4)

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            one, two, three = [SharedAdmission(await held.link(), 0) for _ in range(3)]
            assert await one.acquire("alice") == 0.0
            second = asyncio.create_task(two.acquire("alice"))
            await asyncio.sleep(0.02)
            third = asyncio.create_task(three.acquire("alice"))
            assert await one.acquire("bob") == 0.0  # another key is not held up
            await asyncio.sleep(0.05)
            assert not second.done() and not third.done()
            one.release("alice")
            assert await second > 0  # the first in the queue, though on another worker
            assert not third.done()
            two.release("alice")
            assert await third > 0
            admission = held.coordinator.models[0].admission
            assert admission.active == 2 and admission.waiting == 0

    run(main())


def test_refusals_cross_the_socket_with_their_reason(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    settings = make_settings(max_concurrency=1, queue_size=0, retry_after_seconds=7)

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            one, two = [SharedAdmission(await held.link(), 0) for _ in range(2)]
            await one.acquire("alice")
            with pytest.raises(Overloaded) as full:
                await two.acquire("bob")
            assert (full.value.reason, full.value.retry_after_seconds) == ("queue_full", 7)
            held.coordinator.models[0].admission.set_memory_low(True)
            with pytest.raises(MemoryLow) as low:
                await two.acquire("bob")
            assert low.value.reason == "memory_low" and low.value.status_code == 503

    run(main())


def test_a_worker_that_dies_gives_its_slots_and_counts_back(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    settings = make_settings(
        upstream_url="http://127.0.0.1:9,http://127.0.0.1:10", max_concurrency=1
    )

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            doomed = await held.link()
            await SharedAdmission(doomed, 0).acquire("alice")
            SharedReplicaCounts(doomed, 0).started(1)
            waiting = asyncio.create_task(SharedAdmission(await held.link(), 0).acquire("bob"))
            model = held.coordinator.models[0]
            await settle(lambda: model.in_flight == [0, 1] and model.admission.waiting == 1)
            await doomed.close()
            await waiting  # granted once the dead worker's slot came back
            await settle(lambda: model.in_flight == [0, 0])
            assert model.admission.active == 1

    run(main())


def test_a_wait_given_up_leaves_the_queue(make_settings: MakeSettings, tmp_path: Path) -> None:
    settings = make_settings(max_concurrency=1)

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            one, two = [SharedAdmission(await held.link(), 0) for _ in range(2)]
            await one.acquire("alice")
            wait = asyncio.create_task(two.acquire("bob"))
            admission = held.coordinator.models[0].admission
            await settle(lambda: admission.waiting == 1)
            wait.cancel()  # the client left while queued
            await settle(lambda: admission.waiting == 0)
            one.release("alice")
            await settle(lambda: admission.active == 0)  # nobody was granted the slot

    run(main())


def test_a_slot_granted_as_its_client_left_goes_back(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    """The parent grants a free slot at once; a worker whose client left before that
    answer came gives it back, so no slot leaks."""
    settings = make_settings(max_concurrency=4)

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            one, two = [SharedAdmission(await held.link(), 0) for _ in range(2)]
            await one.acquire("alice")
            admission = held.coordinator.models[0].admission
            for _ in range(3):
                gone = asyncio.create_task(two.acquire("bob"))
                await asyncio.sleep(0)  # the acquire is on its way
                gone.cancel()
                await asyncio.sleep(0.01)
            one.release("alice")
            await settle(lambda: admission.active == 0)  # none of the three kept a slot

    run(main())


def test_the_replica_order_counts_every_workers_requests(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    """Affinity spills to the other replica once the preferred one has
    `replica_max_in_flight` requests, whichever workers sent them."""
    settings = make_settings(
        upstream_url="http://127.0.0.1:9,http://127.0.0.1:10", replica_max_in_flight=2
    )
    key = b"\x01" * 16

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            one, two = [SharedReplicaCounts(await held.link(), 0) for _ in range(2)]
            preferred = (await one.order(key, [True, True]))[0]
            assert (await two.order(key, [True, True]))[0] == preferred  # same key, same choice
            one.started(preferred)
            two.started(preferred)
            model = held.coordinator.models[0]
            await settle(lambda: model.in_flight[preferred] == 2)
            assert await one.order(key, [True, True]) == [1 - preferred, preferred]
            two.finished(preferred)
            await settle(lambda: model.in_flight[preferred] == 1)
            assert (await two.order(key, [True, True]))[0] == preferred
            # A worker that saw the preferred replica fail routes away from it.
            assert (await two.order(key, [preferred == 1, preferred == 0]))[0] == 1 - preferred

    run(main())


def test_a_chat_session_is_one_memory_whichever_worker_serves_it(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    settings = make_settings()
    first = {"messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "q"}]}
    broken = {"messages": [{"role": "system", "content": "b"}, {"role": "user", "content": "q"}]}

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            one, two = [SharedDivergence(await held.link()) for _ in range(2)]
            assert one.observe("alice\0id\0s1", first) is None
            await settle(lambda: len(held.coordinator.divergence) == 1)
            assert two.observe("alice\0id\0s1", broken) is None  # counted by the parent
            await settle(
                lambda: (
                    'gateway_prefix_divergence_total{segment="system"} 1.0'
                    in generate_latest(held.coordinator.registry).decode()
                )
            )

    run(main())


def samples(text: bytes | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = text.decode() if isinstance(text, bytes) else text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def worker_registry(requests: float, healthy: float, limit: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("gateway_requests", "r", ["route"], registry=registry).labels("/v1/x").inc(requests)
    Gauge("gateway_upstream_healthy", "h", ["replica"], registry=registry).labels("0").set(healthy)
    Gauge("gateway_concurrency_limit", "l", registry=registry).set(limit)
    return registry


def test_metrics_are_the_whole_gateways() -> None:
    parent_text = generate_latest(worker_registry(0, 1, 128)).decode()
    workers = [generate_latest(worker_registry(n, h, 256)).decode() for n, h in ((3, 1), (4, 0))]
    merged = samples(merge_metrics(parent_text, workers))
    assert merged[("gateway_requests_total", (("route", "/v1/x"),))] == 7
    created = [
        samples(text)[("gateway_requests_created", (("route", "/v1/x"),))]
        for text in (parent_text, *workers)
    ]
    assert merged[("gateway_requests_created", (("route", "/v1/x"),))] == min(created)
    # Any worker that saw the replica fail; the limit the parent's control poll set.
    assert merged[("gateway_upstream_healthy", (("replica", "0"),))] == 0
    assert merged[("gateway_concurrency_limit", ())] == 128


def test_a_scrape_asks_every_worker(make_settings: MakeSettings, tmp_path: Path) -> None:
    settings = make_settings(max_concurrency=64)

    async def main() -> None:
        async with parent(settings, tmp_path) as held:
            links = [await held.link(worker_registry(n, 1, 64)) for n in (2, 5)]
            merged = samples(await links[0].metrics_text())
            assert merged[("gateway_requests_total", (("route", "/v1/x"),))] == 7
            assert merged[("gateway_concurrency_limit", ())] == 64
            assert ("process_cpu_seconds_total", ()) in merged  # the parent's own

    run(main())


# ---- the process ---------------------------------------------------------------------


def gateway_env(upstream: str, port: int, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_UPSTREAM_URL=upstream,
        GATEWAY_API_KEYS="alice:sk-alice-1",
        GATEWAY_HOST="127.0.0.1",
        GATEWAY_PORT=str(port),
        GATEWAY_STATE_DIR=str(tmp_path / "state"),
        GATEWAY_LOG_LEVEL="warning",
        **extra,
    )
    return env


def test_a_bad_worker_count_is_one_line(tmp_path: Path) -> None:
    env = gateway_env("http://127.0.0.1:9", 9, tmp_path, GATEWAY_WORKERS="0")
    done = subprocess.run(
        [sys.executable, "-m", "gateway"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "GATEWAY_WORKERS" in done.stderr


def test_a_coordinator_that_cannot_listen_stops_the_gateway_in_one_line(tmp_path: Path) -> None:
    long_tmp = tmp_path / ("t" * 120)  # a Unix socket path is at most 107 bytes
    long_tmp.mkdir()
    env = gateway_env("http://127.0.0.1:9", 9, tmp_path, GATEWAY_WORKERS="2")
    env["TMPDIR"] = str(long_tmp)
    done = subprocess.run(
        [sys.executable, "-m", "gateway"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gateway: the workers' coordinator did not start (OSError")


def workers_of(pid: int) -> list[psutil.Process]:
    """The uvicorn workers (multiprocessing's spawned children) of the gateway `pid`."""
    return [c for c in psutil.Process(pid).children() if "spawn_main" in " ".join(c.cmdline())]


@pytest.mark.vllm
def test_two_workers_are_one_gateway(vllm_server: VLLMServer, tmp_path: Path) -> None:
    """One key's limit holds over both workers, every scrape counts both, and SIGTERM
    stops them all with exit 0."""
    port = free_port()
    env = gateway_env(
        vllm_server.url,
        port,
        tmp_path,
        GATEWAY_WORKERS="2",
        GATEWAY_MAX_CONCURRENCY_PER_KEY="1",
        GATEWAY_QUEUE_SIZE="0",
    )
    log = (tmp_path / "gateway.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, "/healthz", proc, "the gateway", tmp_path / "gateway.log")
        deadline = time.monotonic() + 60
        while len(workers_of(proc.pid)) < 2:
            assert time.monotonic() < deadline, psutil.Process(proc.pid).children()
            time.sleep(0.2)
        statuses = asyncio.run(_burst(url, 6))
        assert sorted(statuses) == [200] + [429] * 5
        for _ in range(4):  # whichever worker takes the scrape
            got = samples(httpx.get(url + "/metrics", timeout=10).text)
            route = "/v1/chat/completions"
            ok = (("route", route), ("status_class", "2xx"))
            refused = (("route", route), ("status_class", "4xx"))
            assert got[("gateway_requests_total", ok)] == 1
            assert got[("gateway_requests_total", refused)] == 5
            assert got[("gateway_rejected_total", (("reason", "queue_full"),))] == 5
        everything = psutil.Process(proc.pid).children()  # workers and the resource tracker
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        _, alive = psutil.wait_procs(everything, timeout=10)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


async def _burst(url: str, count: int) -> list[int]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 1500,  # the one admitted stream outlasts the burst
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"authorization": "Bearer sk-alice-1"}
    # One connection each, so that the kernel hands them to both workers.
    clients = [httpx.AsyncClient(timeout=120) for _ in range(count)]

    async def one(client: httpx.AsyncClient) -> int:
        async with client.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=headers
        ) as response:
            async for _ in response.aiter_bytes():
                pass
            return response.status_code

    try:
        return list(await asyncio.gather(*(one(c) for c in clients)))
    finally:
        for client in clients:
            await client.aclose()
