"""The calibration copy of the gateway (`bench/spin_gateway.py`) and `--spin`."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import gateway_overhead
from bench.gateway_overhead import _spins
from bench.overhead_report import Round, print_calibration, saved_cpu_per_request_us, spin_name
from bench.spin_gateway import install, spin, spin_from_env
from gateway.proxy import ProxyResponse
from tests.bench.overhead_cli import run_overhead


def test_spin_burns_that_much_of_the_threads_cpu() -> None:
    before = time.thread_time_ns()
    spin(3000)
    assert time.thread_time_ns() - before >= 3_000_000


def test_install_spins_before_every_proxied_request(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[tuple[Any, ...]] = []
    reached: list[int] = []

    async def original(self: Any, *args: Any, **kwargs: Any) -> None:
        reached.append(time.thread_time_ns())
        served.append((self, args, kwargs))

    monkeypatch.setattr(ProxyResponse, "__call__", original)  # undone after the test
    install(4000)
    response = object()

    async def call() -> int:
        before = time.thread_time_ns()
        await ProxyResponse.__call__(response, "scope", "receive", "send")  # type: ignore[arg-type]
        return before

    before = asyncio.run(call())
    assert reached[0] - before >= 4_000_000  # the spin ran between the call and the response
    assert served == [(response, ("scope", "receive", "send"), {})]


@pytest.mark.parametrize("raw", ["", "abc", "-1", "100001", "nan"])
def test_a_bad_spin_is_refused_with_what_is_allowed(raw: str) -> None:
    allowed = r"BENCH_SPIN_US=.*expected microseconds per request, 0-100000"
    with pytest.raises(ValueError, match=allowed):
        spin_from_env({"BENCH_SPIN_US": raw})
    done = subprocess.run(
        [sys.executable, "-m", "bench.spin_gateway"],
        env={"BENCH_SPIN_US": raw, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "expected microseconds per request" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("text", ["0", "a", "100,100", "", "100,,300", "200000"])
def test_spin_option_refuses_bad_lists(text: str) -> None:
    with pytest.raises(Exception, match="distinct whole microseconds"):
        _spins(text)
    assert _spins("300,100") == [300, 100]


def _rounds(ttft_s: float, n: int = 6) -> list[Round]:
    return [Round(ttft_s=[ttft_s] * 4, tokens=40, wall_s=1.0) for _ in range(n)]


@pytest.mark.parametrize(
    ("base", "embedded", "source", "own_us", "best", "verdict"),
    [
        # 1.16 - 1.5 * 0.07 = 1.055: above the 1.05 target with no spread at all.
        ("gateway", False, "synthetic upstream", 150.0, "1.055", "missed"),
        # The embedded gateway and its embedded+N paths: 1.16 - 0.5 * 0.07 = 1.125.
        ("embedded", True, "before vLLM's handler, on its loop", 50.0, "1.125", "missed"),
    ],
)
def test_calibration_fits_the_spinning_copies(
    capsys: pytest.CaptureFixture[str],
    base: str,
    embedded: bool,
    source: str,
    own_us: float,
    best: str,
    verdict: str,
) -> None:
    """The line runs through the gateway and its own spinning copies only (nginx and
    the other kind's copies are not on it)."""
    spun = [spin_name(us, embedded=embedded) for us in (100, 300)]
    results = {
        "direct": _rounds(0.050),
        base: _rounds(0.058),  # 1.16x
        "nginx": _rounds(0.053),
        spun[0]: _rounds(0.0615),  # +0.07 per 100 us
        spun[1]: _rounds(0.0685),
        spin_name(200, embedded=not embedded): _rounds(0.2),  # the other kind: off the line
    }
    print_calibration(32, results, own_us=own_us)
    out = capsys.readouterr().out
    assert f"calibration at 32 streams ({base}, {spun[0]}, {spun[1]})" in out
    assert "per 100 us of gateway CPU per request 0.070" in out
    assert f"own CPU per request ({source}): {own_us:.0f} us" in out
    assert f"at best, with none of it: {best}" in out and f"ttft p50 <= 1.05x {verdict}" in out


def test_no_calibration_without_spinning_copies(capsys: pytest.CaptureFixture[str]) -> None:
    print_calibration(32, {"direct": _rounds(0.05), "gateway": _rounds(0.06)}, own_us=150.0)
    assert capsys.readouterr().out == ""


def test_saved_cpu_per_request_is_averaged_over_the_runs_that_have_it(tmp_path: Path) -> None:
    paths = []
    for i, meta in enumerate(
        [{"gateway_cpu_per_request_us": 150.0}, {"gateway_cpu_per_request_us": 170}, {}]
    ):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps({"meta": meta, "levels": {}}))
        paths.append(str(path))
    assert saved_cpu_per_request_us(paths) == pytest.approx(160.0)
    assert saved_cpu_per_request_us(paths[2:]) is None


def test_spinning_copies_race_on_the_synthetic_upstream(tmp_path: Path) -> None:
    """20 ms of CPU per request, 4 streams at once: the copy's first tokens come tens
    of milliseconds after the gateway's, and the line through them slopes up."""
    saved = tmp_path / "run.json"
    args = ["--rounds", "2", "--concurrency", "4", "--events", "4", "--gap-ms", "2"]
    args += ["--spin", "20000", "--save", str(saved)]
    done = run_overhead(*args, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {m[1]: float(m[2]) for m in re.finditer(r"^\s*4\s+(\S+)\s+([\d.]+)", done.stdout, re.M)}
    assert rows["gw+20000us"] > rows["gateway"] + 20, done.stdout  # TTFT p50, ms
    slope = re.search(r"per 100 us of gateway CPU per request (-?[\d.]+)", done.stdout)
    assert slope is not None and float(slope[1]) > 0, done.stdout
    assert "at best, with none of it:" in done.stdout
    meta = json.loads(saved.read_text())["meta"]
    assert meta["gateway_cpu_per_request_us"] > 0
    pooled = run_overhead("--pool", str(saved), timeout=60)
    assert "at best, with none of it:" in pooled.stdout, pooled.stdout
    assert gateway_overhead.spin_name(20000) == "gw+20000us"
