"""`python -m bench.gateway_overhead` run as a user would, for the benchmark's tests."""

from __future__ import annotations

import subprocess
import sys


def run_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m module args`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_overhead(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The overhead bench with `args`, its output captured as text."""
    return run_module("bench.gateway_overhead", *args, timeout=timeout)
