"""Fixtures for the entrypoint tests: a real plan of the tiny model, a captured console."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from entrypoint.console import Console

TINY_KV_BYTES = 256 * 1024**2


@pytest.fixture(scope="session")
def tiny_plan(tiny_model_dir: Path) -> Plan:
    """The plan the vLLM tests run with: tiny dense model, CPU, 256 MiB KV pool."""
    return build_plan(
        PlanOptions(
            model=str(tiny_model_dir),
            device="cpu",
            kv_cache_memory_bytes=TINY_KV_BYTES,
            max_model_len=4096,
            max_num_seqs=4,
            max_num_batched_tokens=512,
        )
    )


class Captured(Console):
    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()
        super().__init__(self.out, self.err)


@pytest.fixture
def console() -> Captured:
    return Captured()
