"""Reading a GPU start recorded by `python -m entrypoint.gpu_check` (its folder holds
vllm.log and report.json) and planning against it, for the GPU-fixture tests."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from budget.cli import main
from entrypoint.logscan import Observed, observed_in

GiB = 1024**3
HALF_LOGGED_GIB = 0.005 * GiB  # gpu_worker.py prints the pool in GiB with two decimals


def observed(run: Path) -> Observed:
    return observed_in((run / "vllm.log").read_text().splitlines())


def report(run: Path) -> dict[str, object]:
    result: dict[str, object] = json.loads((run / "report.json").read_text())
    return result


def plan(run: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    """`python -m budget plan --json` on the run's folder for vLLM 0.24.0."""
    argv = ["plan", "--model", str(run), "--vllm-version", "0.24.0", "--json", *extra]
    assert main(argv) in (0, 1), capsys.readouterr().err
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def planned_weights(planned: dict[str, object]) -> int:
    components = planned["components"]
    assert isinstance(components, dict)
    return sum(v for k, v in components.items() if k.startswith("weights."))


def tokens_around_the_logged_pool(
    run: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, int]:
    """The planner's tokens at the pool vLLM logged, ± half its last printed digit."""
    seen = observed(run)
    assert seen.kv_cache_bytes is not None
    low, high = (
        plan(run, capsys, *args, "--kv-cache-memory-bytes", str(int(pool)))["kv_cache_tokens"]
        for pool in (seen.kv_cache_bytes - HALF_LOGGED_GIB, seen.kv_cache_bytes + HALF_LOGGED_GIB)
    )
    assert isinstance(low, int) and isinstance(high, int)
    return low, high


SPLIT = re.compile(
    r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB"
)


@dataclass(frozen=True)
class Split:
    """vLLM's debug split of its profiling run (gpu_worker.py, VLLM_LOGGING_LEVEL=DEBUG)."""

    torch_peak_gib: float
    non_torch_gib: float


def debug_log(debug_log_gz: Path) -> str:
    """A whole gzipped debug log, as vLLM wrote it."""
    return gzip.decompress(debug_log_gz.read_bytes()).decode()


def debug_kv_pool(debug_log_gz: Path) -> int:
    """The KV pool a gzipped debug log reports, in bytes."""
    seen = observed_in(debug_log(debug_log_gz).splitlines())
    assert seen.kv_cache_bytes is not None
    return seen.kv_cache_bytes


def profiling_split(debug_log_gz: Path) -> Split:
    found = SPLIT.findall(debug_log(debug_log_gz))
    assert len(found) == 1, debug_log_gz
    return Split(float(found[0][0]), float(found[0][1]))
