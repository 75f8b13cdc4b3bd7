"""Session-wide fixtures: the tiny model and the one shared serving vLLM."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.tiny_model import TINY_SERVE_ARGS, write_tiny_model
from tests.termination import pytest_configure  # noqa: F401  (SIGTERM tears down)
from tests.vllm_proc import VLLMServer

# The flags the shared server runs with: prefix caching (vLLM's default) and the
# usage details the gateway reads (`prompt_tokens_details.cached_tokens`).
SHARED_SERVER_ARGS = (*TINY_SERVE_ARGS, "--enable-prompt-tokens-details")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "dense", "dense")


@pytest.fixture(scope="session")
def vllm_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    """The one serving vLLM of the test session (served name `tiny`)."""
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = VLLMServer(tiny_model_dir, SHARED_SERVER_ARGS, log_path)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()
