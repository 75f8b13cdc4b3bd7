"""The memory watchdog under real pressure, in the shared CPU stack's vLLM container
(compose.cpu.yaml gives it a memory limit; tests/docker/stack.py TUNING a 1 GiB floor, a
4 s hold, a 4 s drain and a 1 s control poll for the gateway).

A process `docker exec`ed into the container takes memory in 64 MiB chunks, each
written so that the kernel charges it to the container's cgroup. Held 512 MiB above the
floor under a steady load, nothing trips; taken 256 MiB under it (step by step until
the entrypoint reads it so) and a stream started within the hold, the gateway refuses
new work with 503 + Retry-After, the entrypoint stops vLLM and exits 4 (no OOM kill),
the stream ends with an error event, and the restart policy brings the container back
to serve. One more vLLM restart, no other stack.

What the entrypoint reads as available moves on its own: under pressure the kernel
moves file pages (vLLM's and torch's mapped libraries) to its inactive list, which
counts as available. So until the container stops, the test keeps the reading in a band
under the floor and over half of it, taking or giving back chunks as it moves.

A stream in flight when vLLM is stopped ends saying why: with vLLM's abort (its API
server, stopping, ends the request with finish_reason "abort" and [DONE]), with vLLM's
own error event (its engine core is gone: `EngineCore encountered an issue`) where its
API server still writes one, else with the gateway's (the upstream connection closed
mid-stream).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import openai
import pytest

from entrypoint.watchdog import HARD_FLOOR_SHARE
from tests.docker import faults
from tests.docker import stack as st

pytestmark = pytest.mark.docker

MiB = 1024**2
GiB = 1024**3
CHUNK_BYTES = 64 * MiB  # PRESSURE's step
# Reads a byte count a line on stdin and holds that much, in 64 MiB chunks
# (`b"\x01" * n` writes every page; a calloc'd bytearray would stay uncharged).
PRESSURE = (
    "import sys, time\n"
    "held = []\n"
    "for line in sys.stdin:\n"
    "    want = max(0, int(line)) // (64 << 20)\n"
    "    del held[want:]\n"
    "    while len(held) < want:\n"
    "        held.append(b'\\x01' * (64 << 20))\n"
    "        time.sleep(0.05)\n"
    "    print('held', len(held) * (64 << 20), flush=True)\n"
)
STEADY_MARGIN_BYTES = 512 * MiB
UNDER_BYTES = 256 * MiB
# The hold, the drain and the SIGTERM grace, with room: the watchdog has tripped by then.
TRIP_TIMEOUT_S = 120
# A restart of the CPU stack's vLLM takes under a minute here; ten is a failure.
RESTART_TIMEOUT_S = 600
STEADY_REQUESTS = 12
CONTROL_METRICS = "http://127.0.0.1:8001/metrics"


class Pressure:
    """The memory-taking process in the vLLM container, fed targets on its stdin."""

    def __init__(self, container: str) -> None:
        self.proc = subprocess.Popen(
            ["docker", "exec", "-i", container, "python3", "-c", PRESSURE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.held = 0

    def hold(self, total_bytes: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{total_bytes}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.startswith("held "), line
        self.held = int(line.split()[1])

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)  # waits, and closes both pipes


def container_name(stack: st.Stack) -> str:
    return str(faults.container(stack.env, "vllm")["Name"])


def control_metrics(container: str) -> str:
    """The entrypoint's /metrics, read inside the container (its port is not published)."""
    read = "import urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
    got = subprocess.run(
        ["docker", "exec", container, "python3", "-c", f"import sys; {read}", CONTROL_METRICS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    return got.stdout


def sample(metrics: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", metrics, re.MULTILINE)
    assert match, f"no {name}{labels} in the control endpoint's metrics"
    return float(match[1])


def memory(container: str, kind: str) -> int:
    text = control_metrics(container)
    return int(sample(text, "sparkserve_host_memory_bytes", f'{{kind="{kind}"}}'))


def inspect(container: str) -> dict[str, object]:
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{json .}}", container],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found: dict[str, object] = json.loads(out.stdout)
    return found


def oom_events(container: str, since: float) -> list[str]:
    events = subprocess.run(
        ["docker", "events", "--since", f"{since:.0f}", "--until", f"{time.time():.0f}",
         "--filter", f"container={container}", "--filter", "event=oom"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return events.stdout.split("\n")[:-1]


@pytest.fixture
def pressure(stack: st.Stack) -> Iterator[Pressure]:
    taker = Pressure(container_name(stack))
    yield taker
    taker.close()


def test_the_watchdog_reads_the_containers_cgroup_limit(stack: st.Stack) -> None:
    """This machine's Docker uses cgroup v1: the control endpoint's total is the
    container's memory limit as Docker set it, not the host's memory."""
    name = container_name(stack)
    host_config = inspect(name)["HostConfig"]
    assert isinstance(host_config, dict)
    limit = int(host_config["Memory"])
    assert limit > 0, "compose.cpu.yaml gives vLLM no memory limit"
    assert memory(name, "total") == limit
    assert 0 < memory(name, "available") < limit
    assert memory(name, "floor") == int(st.MEMORY_FLOOR_GIB * GiB)


def test_a_steady_load_above_the_floor_never_trips_it(
    stack: st.Stack, client: openai.OpenAI, pressure: Pressure
) -> None:
    name = container_name(stack)
    before = faults.restart_count(stack.env)
    floor = int(st.MEMORY_FLOOR_GIB * GiB)
    pressure.hold(memory(name, "available") - floor - STEADY_MARGIN_BYTES)
    for _ in range(STEADY_REQUESTS):  # about three hold + drain periods of load
        reply = client.chat.completions.create(
            model=st.SERVED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=32
        )
        assert reply.choices[0].message.content is not None
    metrics = control_metrics(name)
    assert sample(metrics, "sparkserve_memory_low_events_total") == 0
    assert sample(metrics, "sparkserve_memory_low") == 0
    assert faults.restart_count(stack.env) == before
    st.note_timing(
        f"memory watchdog, steady: {STEADY_REQUESTS} requests with "
        f"{memory(name, 'available') / GiB:.2f} GiB available over a "
        f"{st.MEMORY_FLOOR_GIB:g} GiB floor: not tripped"
    )


@dataclass
class Keeper:
    """Keeps the entrypoint's reading of available memory between half the floor and
    UNDER_BYTES // 2 under it while the pressure's process lives (it dies with the
    container), and keeps what it read for the failure message."""

    pressure: Pressure
    container: str
    floor: int
    readings: list[str] = field(default_factory=list)

    def tick(self) -> None:
        if not self.pressure.alive:
            return
        try:
            available = memory(self.container, "available")
            low = int(self.floor * HARD_FLOOR_SHARE) + 2 * CHUNK_BYTES
            high = self.floor - UNDER_BYTES // 2
            if low <= available <= high:
                self.readings.append(f"{available / MiB:.0f}")
                return
            target = self.pressure.held + available - self.floor + UNDER_BYTES + CHUNK_BYTES
            self.pressure.hold(target)
            self.readings.append(f"{available / MiB:.0f}->{self.pressure.held / MiB:.0f} held")
        except (AssertionError, OSError, subprocess.SubprocessError):
            return  # the container is stopping: nothing left to keep

    @property
    def moves(self) -> int:
        return sum("->" in reading for reading in self.readings)

    def __str__(self) -> str:
        return f"available MiB read while keeping the pressure: {self.readings[-40:]}"


def _refusals_until_served(
    stack: st.Stack, client: openai.OpenAI, before: int, keeper: Keeper
) -> tuple[list[httpx.Response], float]:
    """Requests every 0.3 s until the restarted container answers: the refusals met.
    Fails after TRIP_TIMEOUT_S where the container has not stopped (the pressure's
    process lives), and says what the entrypoint read."""
    quick = client.with_options(timeout=5.0, max_retries=0)
    refused: list[httpx.Response] = []
    started = time.monotonic()
    while time.monotonic() - started < RESTART_TIMEOUT_S:
        keeper.tick()
        if keeper.pressure.alive and time.monotonic() - started > TRIP_TIMEOUT_S:
            raise AssertionError(
                f"the watchdog did not stop vLLM within {TRIP_TIMEOUT_S} s "
                f"({len(refused)} refusals); {keeper}\n{_entrypoint_lines(stack)}"
            )
        try:
            quick.chat.completions.create(
                model=st.SERVED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            if faults.restart_count(stack.env) > before:
                return refused, time.monotonic() - started
        except openai.APIStatusError as exc:
            refused.append(exc.response)
        except (openai.APIConnectionError, openai.APITimeoutError):
            pass
        time.sleep(0.3)
    raise AssertionError(
        f"the vLLM container did not serve again within {RESTART_TIMEOUT_S} s "
        f"(restarts {faults.restart_count(stack.env) - before}); {keeper}\n"
        f"{_entrypoint_lines(stack)}"
    )


def _entrypoint_lines(stack: st.Stack) -> str:
    logs = st.compose(stack.env, "logs", "--no-color", "--tail", "400", "vllm").stdout
    return "\n".join(line for line in logs.splitlines() if "sparkserve" in line)[-4000:]


def _take_until_under(pressure: Pressure, container: str, floor: int) -> None:
    """Take memory until the entrypoint reads `available` at least half of UNDER_BYTES
    under the floor: taking memory makes the kernel give back page cache, so one step
    can fall short.  Each step aims UNDER_BYTES under, one chunk more (PRESSURE rounds
    down), which stays above the half floor where vLLM would stop without a drain."""
    for _ in range(8):
        available = memory(container, "available")
        if available <= floor - UNDER_BYTES // 2:
            return
        pressure.hold(pressure.held + available - floor + UNDER_BYTES + CHUNK_BYTES)
    raise AssertionError(f"available memory stayed over the floor's margin: {available} B")


def _ended_saying_why(last: dict[str, object]) -> bool:
    """An error event (vLLM's or the gateway's), or vLLM's own abort: its API server,
    stopping, ends the request with finish_reason "abort" and [DONE]."""
    choices = last.get("choices")
    aborted = isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") == "abort" for c in choices
    )
    return "error" in last or aborted


def _code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def test_under_the_floor_it_refuses_then_exits_4_and_the_container_comes_back(
    stack: st.Stack, client: openai.OpenAI, pressure: Pressure
) -> None:
    name = container_name(stack)
    before = faults.restart_count(stack.env)
    since = time.time()
    floor = int(st.MEMORY_FLOOR_GIB * GiB)
    pressure.hold(memory(name, "available") - floor - STEADY_MARGIN_BYTES)
    _take_until_under(pressure, name, floor)
    # Started within the hold, so admitted; vLLM stops one hold and one drain after the
    # floor was crossed, long before this stream's 4,000 tokens are out.
    keeper = Keeper(pressure, name, floor)
    stream = faults.Stream(stack.gateway, stack.key, 4000)
    stream.wait_for_events()
    refused, answered = _refusals_until_served(stack, client, before, keeper)
    stream.thread.join(60)
    logs = st.compose(stack.env, "logs", "--no-color", "vllm").stdout
    memory_low = [r for r in refused if r.status_code == 503 and _code(r) == "memory_low"]
    gateway_logs = st.compose(stack.env, "logs", "--no-color", "gateway").stdout
    polls = [line for line in gateway_logs.splitlines() if "control poll" in line]
    assert memory_low, ([(r.status_code, r.text) for r in refused], polls)
    assert all(int(r.headers["retry-after"]) >= 0 for r in refused if r.status_code == 503)
    assert "refusing new work (/ready 503, memory_low)" in logs, logs[-4000:]
    assert "sparkserve: error: memory watchdog: available memory" in logs, logs[-4000:]
    assert faults.exit_codes(name, since) == [4]
    assert oom_events(name, since) == []
    state = inspect(name)["State"]
    assert isinstance(state, dict) and state["OOMKilled"] is False
    assert faults.restart_count(stack.env) == before + 1
    assert stream.ended, "the stream did not end"
    *_, last = stream.chunks()  # every event it got is whole
    assert _ended_saying_why(last), stream.events[-3:]
    st.note_timing(
        f"memory watchdog, tripped: exit 4 without an OOM kill, first good answer "
        f"{answered:.0f} s after the pressure ({len(memory_low)} 503 memory_low, "
        f"{len(refused) - len(memory_low)} other refusals; the stream ended "
        f"{stream.ended[0]} after {len(stream.events)} events; the pressure moved "
        f"{keeper.moves} times in {len(keeper.readings)} readings to stay under the floor)"
    )
