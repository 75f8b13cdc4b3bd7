"""Several worker processes for the standalone gateway (`GATEWAY_WORKERS`), as correct as one.

One process serves a burst's requests one after another on one event loop: on a GPU
host a burst of 32 streams waits behind it (docs/gateway.md "Workers").  With
`GATEWAY_WORKERS=N` above 1, `python -m gateway` runs N uvicorn workers on one
listening socket (uvicorn restarts one that dies).  Each runs the whole request path
(auth, tenant salt, layout, relay) in parallel with the others, and asks the parent
process, over a Unix socket, for what must be one for all of them:

- **admission**: one `Admission` per model in the parent, so the global and per-key
  limits, the FIFO queue, its size and timeout, the thermal limit and the memory gate
  (the control poll runs in the parent) are exactly those of one process.  A request
  costs one round trip (acquire) and one message (release); a client that leaves
  while queued takes its place out of the queue;
- **replicas**: the in-flight count of each replica and the round-robin turn; with
  more than one replica the parent orders a request's candidates by the router of one
  process (`gateway.core.routing`), from those counts and the worker's view of the
  replicas' health (each worker checks `/health` itself);
- **prefix divergence**: one memory of chat sessions, whichever worker served them;
- **/metrics**: the worker asked gathers every worker's registry and the parent's,
  summed (`merge_metrics`), so every scrape sees the whole gateway.

Tenant salts need nothing shared: every worker derives them from the same secret,
which the parent reads (or creates) before the workers start.  A worker that dies
gives back its slots and in-flight counts when its connection to the parent closes.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import math
import os
import signal
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gateway.core.divergence import DivergenceTracker, Segments, split_segments
from gateway.core.errors import MemoryLow, Overloaded
from gateway.core.metrics import GatewayMetrics
from gateway.core.routing import ReplicaState, candidates
from gateway.edge.build import admission_of
from gateway.edge.control_poll import poll_forever
from gateway.edge.secrets import load_secret
from gateway.standalone.models import control_polls
from gateway.standalone.settings import GatewaySettings
from gateway.standalone.upstream import make_client

log = logging.getLogger("gateway.workers")

# How the parent tells its workers where it listens (not a setting: set by the parent).
COORDINATOR_ENV = "SPARKSERVE_GATEWAY_COORDINATOR"
# A worker's share of a /metrics scrape must come back within this.
DUMP_TIMEOUT_SECONDS = 5.0
# Gauges only the parent drives (the control poll): the workers' copies are left out.
PARENT_GAUGES = frozenset({"gateway_concurrency_limit", "gateway_memory_low"})
# Gauges that are one process's view of the same fact: the lowest (any worker that
# saw a replica fail) or the earliest / the largest, not their sum.
MIN_GAUGES = frozenset({"gateway_upstream_healthy", "process_start_time_seconds"})
MAX_GAUGES = frozenset({"process_max_fds"})


# ---- merging /metrics ------------------------------------------------------------


class _Merged(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def merge_metrics(parent: str, workers: Iterable[str]) -> bytes:
    """One exposition of the parent's and every worker's metrics: samples of the
    same name and labels summed, but for `PARENT_GAUGES` (the parent's),
    `MIN_GAUGES`, `MAX_GAUGES` and `_created` timestamps (the earliest)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = {}
    sources = [(True, parent), *((False, text) for text in workers)]
    for from_parent, text in sources:
        for family in text_string_to_metric_families(text):
            if not from_parent and family.name in PARENT_GAUGES:
                continue
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                values[family.name].setdefault(key, []).append(sample.value)
    for name, family in families.items():
        combine: Callable[[list[float]], float] = math.fsum
        if name in MIN_GAUGES:
            combine = min
        elif name in MAX_GAUGES:
            combine = max
        for (sample_name, labels), seen in values[name].items():
            created = sample_name.endswith("_created")  # a timestamp: the earliest
            family.add_sample(sample_name, dict(labels), min(seen) if created else combine(seen))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(list(families.values())))
    return generate_latest(registry)


# ---- the parent ------------------------------------------------------------------


def _refusal(exc: Overloaded | MemoryLow) -> dict[str, Any]:
    kind = "memory_low" if isinstance(exc, MemoryLow) else "overloaded"
    return {"err": kind, "why": exc.reason, "msg": exc.message, "ra": exc.retry_after_seconds}


class _Model:
    """What the parent holds for one model: its admission, its replicas' counts."""

    def __init__(self, settings: GatewaySettings, names: list[str]) -> None:
        self.admission = admission_of(settings)
        self.names = names
        self.in_flight = [0] * len(names)
        self.turn = 0


class _Worker:
    """One worker's connection, and what it holds (given back if it goes)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.waits: dict[int, asyncio.Task[None]] = {}
        self.slots: Counter[tuple[int, str]] = Counter()
        self.started: Counter[tuple[int, int]] = Counter()
        self.dumps: dict[int, asyncio.Future[str]] = {}

    def send(self, message: dict[str, Any]) -> None:
        if not self.writer.is_closing():
            self.writer.write(orjson.dumps(message) + b"\n")


class Coordinator:
    """The parent's shared state, served to the workers (module docstring)."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # the parent's CPU and memory count too
        self.metrics = GatewayMetrics.create(self.registry)
        self.metrics.concurrency_limit.set(settings.max_concurrency)
        upstreams = settings.model_upstreams()
        self.models = [_Model(settings, list(m.replica_names)) for m in upstreams]
        self.divergence = DivergenceTracker(settings.session_memory)
        self.workers: set[_Worker] = set()
        self._next_dump = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.polls = control_polls(
            settings, self.metrics, upstreams, [model.admission for model in self.models]
        )

    async def serve(self, path: Path, started: threading.Event | None = None) -> None:
        """Listen on `path` until cancelled; the control polls run meanwhile."""
        server = await asyncio.start_unix_server(self._connected, path=str(path))
        client = make_client(self.settings, None)  # the app's own control-plane client
        polls = [
            asyncio.create_task(
                poll_forever(poll, client, url + "/metrics", self.settings.thermal_poll_seconds)
            )
            for url, poll in self.polls.items()
        ]
        if started is not None:
            started.set()
        try:
            async with server:
                await server.serve_forever()
        finally:
            for poll in polls:
                poll.cancel()
            await client.aclose()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        worker = _Worker(writer)
        self.workers.add(worker)
        try:
            while line := await reader.readline():
                await self._handle(worker, orjson.loads(line))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.workers.discard(worker)
            self._gone(worker)
            writer.close()

    def _gone(self, worker: _Worker) -> None:
        for wait in worker.waits.values():
            wait.cancel()
        for (model, key), count in worker.slots.items():
            for _ in range(count):
                self.models[model].admission.release(key)
        for (model, replica), count in worker.started.items():
            self.models[model].in_flight[replica] -= count
        for dump in worker.dumps.values():
            if not dump.done():
                dump.cancel()
        held = sum(worker.slots.values())
        if held:
            log.warning("a gateway worker left holding %d admission slots: given back", held)

    async def _handle(self, worker: _Worker, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "acquire":
            ident, model, key = message["i"], message["m"], message["k"]
            if self.models[model].admission.try_take(key):  # the common case: no task
                worker.slots[(model, key)] += 1
                worker.send({"i": ident, "ok": 0.0})
            else:
                worker.waits[ident] = asyncio.create_task(self._acquire(worker, ident, message))
        elif op == "release":
            worker.slots[(message["m"], message["k"])] -= 1
            self.models[message["m"]].admission.release(message["k"])
        elif op == "cancel":
            wait = worker.waits.pop(message["i"], None)
            if wait is not None:
                wait.cancel()
        elif op == "route":
            worker.send({"i": message["i"], "ok": self._route(message)})
        elif op == "start":
            worker.started[(message["m"], message["r"])] += 1
            self.models[message["m"]].in_flight[message["r"]] += 1
        elif op == "finish":
            worker.started[(message["m"], message["r"])] -= 1
            self.models[message["m"]].in_flight[message["r"]] -= 1
        elif op == "observe":
            segments = Segments(
                bytes.fromhex(message["s"]),
                bytes.fromhex(message["t"]),
                tuple(bytes.fromhex(h) for h in message["h"]),
            )
            segment = self.divergence.observe_segments(message["k"], segments)
            if segment is not None:
                self.metrics.prefix_divergence.labels(segment).inc()
        elif op == "metrics":  # not awaited here: the asker's own dump comes on this line
            task = asyncio.create_task(self._answer_metrics(worker, message["i"]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif op == "dumped":
            dump = worker.dumps.pop(message["i"], None)
            if dump is not None and not dump.done():
                dump.set_result(message["ok"])

    async def _acquire(self, worker: _Worker, ident: int, message: dict[str, Any]) -> None:
        model, key = message["m"], message["k"]
        try:
            waited = await self.models[model].admission.acquire(key)
        except (Overloaded, MemoryLow) as exc:
            worker.send({"i": ident, **_refusal(exc)})
            return
        except asyncio.CancelledError:  # the worker gave up the wait (its client left)
            worker.send({"i": ident, "cancelled": True})  # Admission tidied up the queue
            return
        finally:
            worker.waits.pop(ident, None)
        worker.slots[(model, key)] += 1
        worker.send({"i": ident, "ok": waited})

    def _route(self, message: dict[str, Any]) -> list[int]:
        model = self.models[message["m"]]
        states = [
            ReplicaState(name, healthy, count)
            for name, healthy, count in zip(model.names, message["h"], model.in_flight, strict=True)
        ]
        key = bytes.fromhex(message["a"]) if message["a"] is not None else None
        order = candidates(
            states,
            key,
            routing=self.settings.routing,
            max_in_flight=self.settings.replica_max_in_flight,
            turn=model.turn,
        )
        model.turn += 1
        return order

    async def _answer_metrics(self, worker: _Worker, ident: int) -> None:
        worker.send({"i": ident, "ok": (await self._gather()).decode()})

    async def _gather(self) -> bytes:
        """Every worker's metrics (each asked at once) merged with the parent's."""
        waits: list[asyncio.Future[str]] = []
        for worker in list(self.workers):
            self._next_dump += 1
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            worker.dumps[self._next_dump] = future
            waits.append(future)
            worker.send({"op": "dump", "i": self._next_dump})
        if waits:
            await asyncio.wait(waits, timeout=DUMP_TIMEOUT_SECONDS)
        texts = [w.result() for w in waits if w.done() and not w.cancelled() and not w.exception()]
        if len(texts) < len(waits):
            log.warning(
                "/metrics: %d of %d workers did not answer", len(waits) - len(texts), len(waits)
            )
        return merge_metrics(generate_latest(self.registry).decode(), texts)


# ---- a worker --------------------------------------------------------------------


class CoordinatorGone(Exception):
    """The parent process closed its socket: this worker stops."""


class Link:
    """A worker's connection to the parent."""

    def __init__(self, path: str, registry: CollectorRegistry | None = None) -> None:
        self.path = path
        self.registry = registry
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        # Acquires given up before their answer came: a slot granted meanwhile goes back.
        self._given_up: dict[int, dict[str, Any]] = {}
        self.on_gone: Callable[[], None] = _stop_this_worker

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(self.path)
        self._reader_task = asyncio.create_task(self._read(reader))

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
        if self._writer is not None:
            self._writer.close()

    def send(self, message: dict[str, Any]) -> None:
        assert self._writer is not None, "Link.connect() first"
        self._writer.write(orjson.dumps(message) + b"\n")

    async def call(self, message: dict[str, Any]) -> Any:
        """Send `message` and wait for its answer (`ok`, or the whole reply on `err`)."""
        self._next += 1
        ident = self._next
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        self.send({**message, "i": ident})
        try:
            return await future
        except asyncio.CancelledError:
            if message["op"] == "acquire":
                self._given_up[ident] = message
                self.send({"op": "cancel", "i": ident})
            raise
        finally:
            self._pending.pop(ident, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                message = orjson.loads(line)
                if message.get("op") == "dump":
                    text = generate_latest(self.registry).decode() if self.registry else ""
                    self.send({"op": "dumped", "i": message["i"], "ok": text})
                    continue
                future = self._pending.get(message["i"])
                if future is None or future.done():
                    self._late(message)
                    continue
                if "err" in message:
                    future.set_result(message)
                else:
                    future.set_result(message["ok"])
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        for future in self._pending.values():
            if not future.done():
                future.set_exception(CoordinatorGone("the gateway's parent process is gone"))
        self.on_gone()

    def _late(self, message: dict[str, Any]) -> None:
        """The one answer to an acquire given up: a slot the parent granted before it
        read the `cancel` is given back (a wait it ended answers `cancelled`)."""
        asked = self._given_up.pop(message["i"], None)
        if asked is not None and "ok" in message:
            self.send({"op": "release", "m": asked["m"], "k": asked["k"]})

    async def metrics_text(self) -> bytes:
        return str(await self.call({"op": "metrics"})).encode()


def _stop_this_worker() -> None:
    log.error("the gateway's parent process is gone: this worker stops")
    os.kill(os.getpid(), signal.SIGTERM)


class SharedAdmission:
    """A model's admission, held by the parent (the interface of `Admission`)."""

    def __init__(self, link: Link, model: int) -> None:
        self._link = link
        self._model = model

    async def acquire(self, key: str) -> float:
        reply = await self._link.call({"op": "acquire", "m": self._model, "k": key})
        if isinstance(reply, dict):
            error = MemoryLow if reply["err"] == "memory_low" else Overloaded
            raise error(reply["msg"], reason=reply["why"], retry_after_seconds=reply["ra"])
        return float(reply)

    def release(self, key: str) -> None:
        self._link.send({"op": "release", "m": self._model, "k": key})


class SharedReplicaCounts:
    """A model's replica in-flight counts and order, held by the parent."""

    def __init__(self, link: Link, model: int) -> None:
        self._link = link
        self._model = model

    async def order(self, key: bytes | None, healthy: list[bool]) -> list[int]:
        message = {"op": "route", "m": self._model, "a": key.hex() if key else None, "h": healthy}
        return [int(i) for i in await self._link.call(message)]

    def started(self, replica: int) -> None:
        self._link.send({"op": "start", "m": self._model, "r": replica})

    def finished(self, replica: int) -> None:
        self._link.send({"op": "finish", "m": self._model, "r": replica})


class SharedDivergence(DivergenceTracker):
    """Chat sessions remembered by the parent: `observe` sends the segments there,
    which counts a divergence itself (so this worker never does)."""

    def __init__(self, link: Link) -> None:
        super().__init__(1)
        self._link = link

    def observe(self, key: str, body: Any) -> str | None:
        segments = split_segments(body)
        self._link.send(
            {
                "op": "observe",
                "k": key,
                "s": segments.system.hex(),
                "t": segments.tools.hex(),
                "h": [h.hex() for h in segments.history],
            }
        )
        return None


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's when installed (as the workers' own), else asyncio's."""
    if importlib.util.find_spec("uvloop") is None:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = importlib.import_module("uvloop").new_event_loop()
    return loop


def serve(settings: GatewaySettings, config: dict[str, Any]) -> None:
    """Run the parent and `settings.workers` workers until SIGTERM or SIGINT."""
    load_secret(settings)  # read, or created once, before any worker derives a salt
    with tempfile.TemporaryDirectory(prefix="sparkserve-gateway-") as tmp:
        path = Path(tmp) / "coordinator.sock"
        coordinator = Coordinator(settings)
        started = threading.Event()
        loop = _new_loop()
        task_box: list[asyncio.Task[None]] = []

        def run_parent() -> None:
            asyncio.set_event_loop(loop)
            task_box.append(loop.create_task(coordinator.serve(path, started)))
            try:
                loop.run_until_complete(task_box[0])
            except asyncio.CancelledError:
                return  # stopped by serve() once the workers are down
            except Exception as exc:  # a bug: the workers cannot go on without it
                failed.append(f"{type(exc).__name__}: {exc}")
            else:
                failed.append("it stopped")
            if started.is_set():
                os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's supervisor stops the workers
            started.set()

        failed: list[str] = []
        thread = threading.Thread(target=run_parent, name="gateway-coordinator", daemon=True)
        thread.start()
        if not started.wait(30) or failed:
            why = failed[0] if failed else "not within 30 s"
            raise SystemExit(f"gateway: the workers' coordinator did not start ({why})")
        os.environ[COORDINATOR_ENV] = str(path)
        uvicorn.run(
            "gateway.standalone.app:worker_app",
            factory=True,
            workers=settings.workers,
            **config,
        )
        if failed:
            raise SystemExit(f"gateway: the workers' coordinator failed ({failed[0]})")
        loop.call_soon_threadsafe(task_box[0].cancel)
        thread.join(10)


__all__ = [
    "COORDINATOR_ENV",
    "Coordinator",
    "Link",
    "SharedAdmission",
    "SharedDivergence",
    "SharedReplicaCounts",
    "merge_metrics",
    "serve",
]
