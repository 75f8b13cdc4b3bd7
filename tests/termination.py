"""A test run stopped with SIGTERM tears its session down, as one stopped with Ctrl-C.

Without this, `timeout pytest` (or a CI runner's SIGTERM) leaves the test session's vLLM,
started in a process group of its own, running after pytest is gone.  With it pytest
sees a KeyboardInterrupt, runs every fixture's teardown (stopping the servers) and
exits as interrupted (devtools/interrupt.py).  Loaded by tests/conftest.py.
"""

from __future__ import annotations

import pytest

from devtools.interrupt import interrupt_on_sigterm


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()
