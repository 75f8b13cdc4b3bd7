"""The CPU stack, started once for the container tests that share it, and the figures
they record (tests/docker/stack.py) printed in the summary."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from tests.docker import stack as st
from tests.docker.stack import TIMINGS_FILE

COLLECTED_AT = time.time()  # only timings this run wrote are shown


@pytest.fixture(scope="session", autouse=True)
def fresh_timings() -> None:
    """Each run's figures alone (before any container test's fixture writes one)."""
    TIMINGS_FILE.parent.mkdir(parents=True, exist_ok=True)
    TIMINGS_FILE.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS_FILE.exists() and TIMINGS_FILE.stat().st_mtime >= COLLECTED_AT:
        terminalreporter.write_sep("-", "test-docker timings")
        terminalreporter.write(TIMINGS_FILE.read_text())


@pytest.fixture(scope="session")
def stack() -> Iterator[st.Stack]:
    """One `make up-cpu` for test_stack.py, test_stack_replicas.py (which scales it to two
    vLLM containers) and test_stack_teardown.py, run in that order; `make down -v` after."""
    if not st.engine_answers():
        pytest.skip("no Docker engine answers `docker info` (as root: make docker-engine)")
    yield from st.up()


@pytest.fixture(scope="session")
def client(stack: st.Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway}/v1", api_key=stack.key, max_retries=0)
