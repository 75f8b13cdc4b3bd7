"""Supervise vLLM: health wait → calibration → warm-up → ready → watch; stop on signal.

Child liveness is checked on every health retry and every watch tick: a dead
vLLM ends the entrypoint at once (exit 3, with its code and last lines); so do a
start-up timeout, /health failing for SPARKSERVE_UNHEALTHY_EXIT_SECONDS after
ready, and an engine that makes no progress for SPARKSERVE_STALL_TIMEOUT_S
(entrypoint/stall.py). A signal stops the whole vLLM process group: SIGTERM, grace period, SIGKILL;
so does the memory watchdog (entrypoint/watchdog.py), from launch on, then exit 4.
Once vLLM has loaded the weights (`Model loading took` from a one-process vLLM, else
/health 200) the context's `after_load` runs once: on unified memory it evicts the
weights' page cache (preflight.after_load_eviction).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import NoReturn, TypeVar

import httpx

from budget.plan import Plan
from entrypoint import calibration
from entrypoint.capacity import capacity_line
from entrypoint.child import VLLMChild, describe_returncode, private_rpc_dir, reap_orphans
from entrypoint.config import EntrypointConfig
from entrypoint.console import Console
from entrypoint.errors import MemoryLowError, VLLMFailedError
from entrypoint.gateway_mode import bypass_headers
from entrypoint.hardware import HostMemory
from entrypoint.logscan import LogWatcher
from entrypoint.memory import read_memory
from entrypoint.planning import Launch
from entrypoint.priority import lower_and_say
from entrypoint.signals import SignalFlag, StopRequested
from entrypoint.stall import Progress, StallWatch, describe, read_progress
from entrypoint.state import FAILED, READY, STOPPING, WARMING_UP, Lifecycle
from entrypoint.warmup import Shape, run_warmup, served_model
from entrypoint.watchdog import MemoryGuard, MemoryWatchdog

T = TypeVar("T")
TICK_SECONDS = 0.2
HEALTH_RETRY_SECONDS = 1.0
HEALTH_INTERVAL_SECONDS = 5.0
HEALTH_TIMEOUT_SECONDS = 3.0
REQUEST_TIMEOUT_SECONDS = 900.0
LAST_LINES = 30
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Context:
    config: EntrypointConfig
    plan: Plan
    launch: Launch
    console: Console
    lifecycle: Lifecycle
    watcher: LogWatcher
    signals: SignalFlag
    environ: dict[str, str]
    after_load: Callable[[], None] | None = None  # run once the weights are loaded
    memory_floor_bytes: int = 0  # 0: no memory watchdog
    read_memory: Callable[[], HostMemory] = read_memory


def base_url(config: EntrypointConfig) -> str:
    host = "127.0.0.1" if config.host in WILDCARD_HOSTS else config.host
    return f"http://{host}:{config.port}"


def make_client(config: EntrypointConfig, launch_env: dict[str, str]) -> httpx.Client:
    """The client for vLLM's health and warm-up: with vLLM's own key, and round an
    embedded gateway (gateway_mode.py says why)."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    headers |= bypass_headers(launch_env)
    return httpx.Client(
        base_url=base_url(config),
        headers=headers,
        timeout=httpx.Timeout(REQUEST_TIMEOUT_SECONDS, connect=5.0),
    )


def answers_health(client: httpx.Client) -> bool:
    try:
        return client.get("/health", timeout=HEALTH_TIMEOUT_SECONDS).status_code == 200
    except httpx.HTTPError:
        return False


def shape_of(plan: Plan) -> Shape:
    s = plan.settings
    return Shape(
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        mtp=s.mtp,
        capture_sizes=tuple(s.capture_sizes),
        fused_moe=plan.model.moe is not None and s.device == "cuda",
    )


class Supervisor:
    def __init__(
        self, ctx: Context, health_interval_seconds: float = HEALTH_INTERVAL_SECONDS
    ) -> None:
        self.ctx = ctx
        self.client = make_client(ctx.config, ctx.launch.env)
        self.started = time.monotonic()
        self.health_interval_seconds = health_interval_seconds
        self._loaded_hook_done = False
        s = ctx.plan.settings
        # One rank's "Model loading took" says all weights are in: one process loads them.
        self._one_loader = s.tp * s.pp == 1 and s.nodes == 1
        self.memory = memory_guard(ctx)

    def run(self) -> int:
        """Launch vLLM and supervise it until a signal (0 / 128+N) or its end (raises)."""
        ctx = self.ctx
        ctx.signals.check()
        ctx.console.say(f"launching vLLM: {ctx.launch.shown()}")
        one_node = ctx.config.role == "single"  # vLLM copies VLLM_* to a cluster's nodes
        sockets = private_rpc_dir(ctx.environ) if one_node else contextlib.nullcontext(ctx.environ)
        with sockets as environ:
            return self._run(environ)

    def _run(self, environ: dict[str, str]) -> int:
        ctx = self.ctx
        try:
            child = VLLMChild(ctx.launch, ctx.console, ctx.watcher, environ)
        except OSError as exc:
            raise VLLMFailedError(f"could not start vLLM ({ctx.launch.argv[0]}): {exc}") from None
        ctx.console.say(f"vLLM pid {child.pid} (own process group)")
        lower_and_say(child.pid, ctx.config.vllm_nice, "vLLM", ctx.console.say)
        try:
            self._start(child)
            self._watch(child)
        except StopRequested as stop:
            return self._stop(child, stop)
        finally:
            child.kill_group()
            self.client.close()

    def check(self, child: VLLMChild) -> None:
        """Signals first (a stop wins), then vLLM's liveness."""
        self.ctx.signals.check()
        code = child.poll()
        reap_orphans(child.pid)
        if code is not None:
            self._report_exit(child, code)
        if self.memory is not None:
            self.memory.tick(time.monotonic(), lambda what: self._memory_stop(child, what))

    def _memory_stop(self, child: VLLMChild, what: str) -> NoReturn:
        """The watchdog's end: vLLM stopped like on SIGTERM, then exit 4."""
        self._stop_vllm(child, what, "")
        raise MemoryLowError(f"memory watchdog: {what}; vLLM stopped")

    def _stop_vllm(self, child: VLLMChild, why: str, then: str) -> None:
        """SIGTERM to vLLM's group, SIGKILL after the grace period; /ready 503 meanwhile."""
        ctx = self.ctx
        ctx.lifecycle.update(phase=STOPPING)
        grace = ctx.config.stop_grace_seconds
        ctx.console.say(f"{why}: stopping vLLM (SIGTERM, SIGKILL after {grace:g} s)")
        code = child.stop(grace)
        ctx.console.say(f"vLLM stopped ({describe_returncode(code)}){then}")

    def _report_exit(self, child: VLLMChild, code: int) -> NoReturn:
        child.kill_group()  # what is left of vLLM holds its output pipe open
        self._fail(child, f"vLLM exited ({describe_returncode(code)})")

    def _fail(self, child: VLLMChild, what: str) -> NoReturn:
        """/ready 503 at once, vLLM's last lines, then exit 3 (the caller kills the group)."""
        phase = self.ctx.lifecycle.status.phase
        self.ctx.lifecycle.update(phase=FAILED, vllm_up=False)
        self.ctx.console.say(f"{what}; its last lines:")
        for line in child.tail(LAST_LINES):
            self.ctx.console.say("  | " + line)
        raise VLLMFailedError(f"{what} during {phase}")

    def _start(self, child: VLLMChild) -> None:
        self._wait_healthy(child)
        ctx = self.ctx
        ctx.console.say(calibration.render(ctx.plan, ctx.watcher.snapshot()))
        if line := capacity_line(ctx.plan, ctx.watcher.snapshot()):
            ctx.console.say(line)
        if ctx.plan.settings.runner == "pooling":
            # The warm-up's requests are chats and completions, which vLLM's pooling
            # runner does not serve.
            ctx.console.phase("warm-up skipped: vLLM's pooling runner serves no chat")
        elif ctx.config.warmup:
            ctx.lifecycle.update(phase=WARMING_UP)
            seconds = self._watched(
                child,
                lambda: run_warmup(self.client, shape_of(ctx.plan), ctx.console, ctx.lifecycle),
            )
            ctx.lifecycle.update(warmup_seconds=seconds)
            ctx.console.phase(f"warm-up done in {seconds:.2f} s")
        else:
            ctx.console.phase("warm-up off (SPARKSERVE_WARMUP=off)")
        elapsed = time.monotonic() - self.started
        ctx.lifecycle.update(phase=READY, startup_seconds=elapsed)
        ctx.console.phase(
            f"ready after {elapsed:.1f} s: {base_url(ctx.config)}/v1, "
            f"/ready 200 on :{ctx.config.control_port}"
        )

    def _wait_healthy(self, child: VLLMChild) -> None:
        timeout = self.ctx.config.startup_timeout
        while True:
            self.check(child)
            if self._one_loader and self.ctx.watcher.snapshot().weights_bytes is not None:
                self._weights_loaded()
            if answers_health(self.client):
                break
            if time.monotonic() - self.started > timeout:
                child.kill_group()
                what = f"vLLM did not answer /health within {timeout:g} s"
                self._fail(child, what + " (SPARKSERVE_STARTUP_TIMEOUT)")
            self.ctx.signals.wait(HEALTH_RETRY_SECONDS)
        self.ctx.lifecycle.update(vllm_up=True)
        self.ctx.console.phase(
            f"server up: /health 200 after {time.monotonic() - self.started:.1f} s"
        )
        self._weights_loaded()

    def _weights_loaded(self) -> None:
        """The context's after-load hook, once."""
        if self._loaded_hook_done or self.ctx.after_load is None:
            return
        self._loaded_hook_done = True
        self.ctx.after_load()

    def _watched(self, child: VLLMChild, work: Callable[[], T]) -> T:
        """Run `work` in a thread while checking signals and vLLM every tick."""
        future: Future[T] = Future()

        def target() -> None:
            try:
                future.set_result(work())
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=target, name="warm-up", daemon=True).start()
        while not future.done():
            self.check(child)
            self.ctx.signals.wait(TICK_SECONDS)
        try:
            return future.result()
        except httpx.HTTPError as exc:
            self.ctx.signals.wait(1.0)  # let a dying vLLM be seen as dead
            self.check(child)
            raise VLLMFailedError(f"vLLM stopped answering during warm-up: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:  # an answer of unexpected shape
            raise VLLMFailedError(f"warm-up failed: {type(exc).__name__}: {exc}") from None

    def _watch(self, child: VLLMChild) -> NoReturn:
        last_health = time.monotonic()
        failing_since: float | None = None
        limit = self.ctx.config.unhealthy_exit_seconds
        stall = Stalls(self, child) if self.ctx.config.stall_timeout_s > 0 else None
        while True:
            self.ctx.signals.wait(TICK_SECONDS)
            self.check(child)
            now = time.monotonic()
            if stall is not None:
                stall.tick(now)
            if now - last_health < self.health_interval_seconds:
                continue
            last_health = now
            answered = answers_health(self.client)
            self._record_health(answered)
            failing_since = None if answered else (now if failing_since is None else failing_since)
            if failing_since is not None and now - failing_since >= limit:
                child.kill_group()
                self._fail(
                    child,
                    f"vLLM failed /health for {now - failing_since:.0f} s "
                    f"(SPARKSERVE_UNHEALTHY_EXIT_SECONDS={limit:g})",
                )

    def stalled(self, child: VLLMChild, what: str) -> NoReturn:
        timeout = self.ctx.config.stall_timeout_s
        child.kill_group()
        self._fail(child, f"{what} (SPARKSERVE_STALL_TIMEOUT_S={timeout:g}); vLLM stopped")

    def _record_health(self, answered: bool) -> None:
        before = self.ctx.lifecycle.status.ready
        after = self.ctx.lifecycle.health(answered).ready
        if before and not after:
            self.ctx.console.say("vLLM stopped answering /health: /ready is 503")
        elif after and not before:
            self.ctx.console.say("vLLM answers /health again: /ready is 200")

    def _stop(self, child: VLLMChild, stop: StopRequested) -> int:
        self._stop_vllm(child, f"received {stop}", f"; exiting {stop.exit_code}")
        return stop.exit_code


def memory_guard(ctx: Context) -> MemoryGuard | None:
    if ctx.memory_floor_bytes <= 0:
        return None
    config = ctx.config
    watchdog = MemoryWatchdog(
        ctx.memory_floor_bytes, config.memory_hold_seconds, config.memory_drain_seconds
    )
    return MemoryGuard(watchdog, ctx.read_memory, ctx.lifecycle, ctx.console.say)


class Stalls:
    """The progress watch of one vLLM (entrypoint/stall.py): reads its /metrics a few
    times per timeout, and runs the idle probe in a thread so that signals and vLLM's
    exit are still seen every tick."""

    def __init__(self, supervisor: Supervisor, child: VLLMChild) -> None:
        self.supervisor = supervisor
        self.child = child
        self.timeout_s = supervisor.ctx.config.stall_timeout_s
        self.every_s = min(HEALTH_INTERVAL_SECONDS, max(TICK_SECONDS, self.timeout_s / 4))
        self.watch = StallWatch(self.timeout_s)
        self.last_read = 0.0
        self.probe: Future[None] | None = None
        self.probed: tuple[float, ...] | None = None  # the progress marks the probe left

    def tick(self, now: float) -> None:
        if self.probe is not None:
            if not self.probe.done():
                return
            error = self.probe.exception()
            self.probe = None
            # A probe that timed out while the engine went on working (a request that
            # came in after it, a long chunked prefill ahead of it) proves nothing: the
            # progress watch judges from here. Only an engine that did nothing at all
            # since the probe went out is stalled.
            if error is not None and self._still_since_the_probe():
                self.supervisor.stalled(
                    self.child,
                    f"vLLM's engine did not answer a one-token probe within "
                    f"{self.timeout_s:g} s ({type(error).__name__}) with nothing admitted",
                )
        if now - self.last_read < self.every_s:
            return
        self.last_read = now
        progress = self._read()
        if progress is None:
            return  # /health failing is the other watch's case
        verdict = self.watch.observe(now, progress)
        if verdict == "stalled":
            self.supervisor.stalled(self.child, describe(progress, self.watch.still_for(now)))
        if verdict == "probe":
            self.probed = progress.marks
            self.probe = Future()
            threading.Thread(target=self._probe, name="stall-probe", daemon=True).start()

    def _still_since_the_probe(self) -> bool:
        progress = self._read()
        return progress is None or progress.marks == self.probed

    def _read(self) -> Progress | None:
        try:
            answer = self.supervisor.client.get("/metrics", timeout=HEALTH_TIMEOUT_SECONDS)
            return read_progress(answer.text) if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def _probe(self) -> None:
        assert self.probe is not None
        future = self.probe
        try:
            client = self.supervisor.client
            body = {"model": served_model(client), "prompt": "ping", "max_tokens": 1}
            client.post("/v1/completions", json=body, timeout=self.timeout_s).raise_for_status()
            future.set_result(None)
        except BaseException as exc:
            future.set_exception(exc)
