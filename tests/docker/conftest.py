"""Print how long the stack took to build and start (tests/docker/stack.py records it)."""

from __future__ import annotations

import time

import pytest

from tests.docker.stack import TIMINGS_FILE

COLLECTED_AT = time.time()  # only timings this run wrote are shown


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS_FILE.exists() and TIMINGS_FILE.stat().st_mtime >= COLLECTED_AT:
        terminalreporter.write_sep("-", "test-docker timings")
        terminalreporter.write(TIMINGS_FILE.read_text())
