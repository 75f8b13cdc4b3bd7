"""bench/schedwait.py: run-queue wait read from /proc, on processes made to contend."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.schedwait import STARVED_SHARE, WaitMeter, describe

SPIN = "while True: pass"


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="needs Linux schedstat")
def test_three_spinners_on_one_cpu_each_wait_most_of_the_time() -> None:
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(3)]
    try:
        cpu = min(os.sched_getaffinity(0))
        for spinner in spinners:
            os.sched_setaffinity(spinner.pid, {cpu})
        meter = WaitMeter({f"spin{i}": s.pid for i, s in enumerate(spinners)})
        time.sleep(1.5)
        shares = meter.shares()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    # Three runnable processes on one CPU: each runs a third and waits two thirds.
    assert sum(shares.values()) > 0.9, shares
    assert all(share > 0.3 for share in shares.values()), shares


def test_an_idle_process_waits_for_nothing() -> None:
    sleeper = subprocess.Popen(["sleep", "5"])
    try:
        meter = WaitMeter({"sleeper": sleeper.pid})
        time.sleep(0.3)
        assert meter.shares()["sleeper"] < 0.05
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_line_warns_only_past_the_threshold() -> None:
    calm = describe({"client": 0.02, "gateway": STARVED_SHARE / 2})
    assert "client 2%" in calm and "warning" not in calm
    starved = describe({"client": 0.69, "gateway": 0.03})
    assert "warning: client waited more than 10%" in starved
    assert "gateway" not in starved.split("warning:")[1]
