"""What vLLM's own environment says to the gateway that runs inside its API server."""

from __future__ import annotations

import os

# Set by vLLM when it runs more than one API server process (vllm/v1/metrics/prometheus.py).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def several_api_servers() -> bool:
    """vLLM serves from several API server processes (it set `PROMETHEUS_MULTIPROC_DIR`)."""
    return bool(os.environ.get(MULTIPROC_ENV))
