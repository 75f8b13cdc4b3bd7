"""Find Prometheus' binaries (Debian's `prometheus` package, `make prometheus-bin`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "prometheus"
INSTALL_HINT = "run `make prometheus-bin` (installs Debian's prometheus package)"


def binary(name: str) -> str:
    """Path of `prometheus` or `promtool`; fails the test (not skips) when missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: {INSTALL_HINT}")
    return path


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("promtool"), *map(str, args)], capture_output=True, text=True, timeout=60
    )
