"""Read vLLM's log lines: start-up phases and the numbers to calibrate the plan against.

Lines parsed (docs/kv-arithmetic.md; vllm/v1/core/kv_cache_utils.py, vllm/v1/worker/gpu_worker.py,
gpu_model_runner.py): `GPU KV cache size: N tokens, Maximum concurrency for L tokens
per request: X.XXx` (CPU prefix on CPU; two lines on vLLM 0.24), `Available KV cache
memory: X GiB`, `Model loading took X GiB`, `Loading weights took X seconds`,
`Initializing model took X seconds`, `Graph capturing finished in N secs, took X GiB`,
`Estimated CUDA graph memory: X GiB total` (and whether vLLM says it subtracted it),
`init engine (…) took X s`, `Starting vLLM server on …`, and whether torch.compile ran
(`Compiling a graph for compile range …`) or loaded its graphs from the compile cache
(`Directly load the compiled graph(s) …`; compilation/backends.py).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from budget.units import GiB

KV_TOKENS = re.compile(r"\b[A-Z]+(?: \+ host)? KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
AVAILABLE_KV = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
MODEL_LOADING = re.compile(r"Model loading took ([\d.]+) GiB")
# gpu_model_runner.py profile_cudagraph_memory; gpu_worker.py subtracts the estimate from
# the requested memory when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on, and says so.
GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB")
GRAPH_ESTIMATE_APPLIED = re.compile(r"CUDA graph memory profiling is enabled")
GRAPHS = re.compile(r"Graph capturing finished in ([\d.]+) secs?, took (-?[\d.]+) GiB")
MODEL_INIT = re.compile(r"Initializing model took ([\d.]+) seconds")
WEIGHTS_READ = re.compile(r"Loading weights took ([\d.]+) seconds")
ENGINE_INIT = re.compile(r"init engine \(.*\) took ([\d.]+) s")
SERVER_UP = re.compile(r"Starting vLLM (?:API )?server on (\S+)")
# platforms/interface.py _align_hybrid_block_size; kv_cache_utils.py grouping.
BLOCK_SIZE = re.compile(r"Setting attention block size to (\d+) tokens")
PADDING_LAYERS = re.compile(r"Add (\d+) padding layers")
COMPILED = re.compile(r"Compiling a graph for compile range")
CACHE_LOADED = re.compile(r"Directly load the compiled graph\(s\)")


CompileCache = Literal["compiled", "loaded"]


@dataclass(frozen=True)
class Observed:
    """What vLLM logged; None until (unless) the line appears."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_model_len: int | None = None
    kv_cache_bytes: int | None = None
    weights_bytes: int | None = None
    cudagraph_bytes: int | None = None
    cudagraph_estimate_bytes: int | None = None  # the profiler's estimate, before capture
    cudagraph_estimate_applied: bool = False  # vLLM took it off the requested memory
    graph_capture_seconds: float | None = None
    block_size: int | None = None  # hybrids: the raised attention block
    padding_layers: int | None = None  # "Add N padding layers" (logged per rank)
    # "compiled" where torch.compile ran (a cold start: the plan sizes it), "loaded" where
    # every graph came from the compile cache (a warm start leaves more for KV).
    compile_cache: CompileCache | None = None


def _gib_bytes(text: str) -> int:
    return round(float(text) * GiB)


def _count(text: str) -> int:
    return int(text.replace(",", ""))


class LogWatcher:
    """Fed every vLLM line (from the forwarding thread); returns phase messages.

    With TP or PP every rank logs its own weights and graph lines: a phase message
    already returned is not returned again (the numbers are still recorded)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._observed = Observed()
        self._reported: set[str] = set()

    def snapshot(self) -> Observed:
        with self._lock:
            return self._observed

    def _update(self, **changes: Any) -> Observed:
        with self._lock:
            self._observed = replace(self._observed, **changes)
            return self._observed

    def feed(self, line: str) -> list[str]:
        """Record the numbers in `line`; the phases it marks, as messages."""
        phases: list[str] = []
        if match := MODEL_INIT.search(line):
            phases.append(f"model initialised in {float(match[1]):.2f} s")
        if match := WEIGHTS_READ.search(line):
            phases.append(f"weights read in {match[1]} s")
        if match := MODEL_LOADING.search(line):
            self._update(weights_bytes=_gib_bytes(match[1]))
            phases.append(f"weights loaded ({float(match[1]):.2f} GiB)")
        if match := GRAPH_ESTIMATE.search(line):
            self._update(cudagraph_estimate_bytes=_gib_bytes(match[1]))
        if GRAPH_ESTIMATE_APPLIED.search(line):
            self._update(cudagraph_estimate_applied=True)
        if match := AVAILABLE_KV.search(line):
            self._update(kv_cache_bytes=_gib_bytes(match[1]))
        if match := BLOCK_SIZE.search(line):
            self._update(block_size=int(match[1]))
        if match := PADDING_LAYERS.search(line):
            self._update(padding_layers=int(match[1]))
        if match := KV_TOKENS.search(line):
            self._update(kv_cache_tokens=_count(match[1]))
            phases.append(f"KV cache sized: {_count(match[1]):,} tokens")
        if match := CONCURRENCY.search(line):
            self._update(concurrency_model_len=_count(match[1]), max_concurrency=float(match[2]))
        if match := GRAPHS.search(line):
            self._update(
                graph_capture_seconds=float(match[1]), cudagraph_bytes=_gib_bytes(match[2])
            )
            phases.append(f"CUDA graphs captured in {match[1]} s ({match[2]} GiB)")
        if COMPILED.search(line):
            self._update(compile_cache="compiled")
            phases.append("torch.compile ran (graphs not in the compile cache)")
        if CACHE_LOADED.search(line) and self.snapshot().compile_cache is None:
            self._update(compile_cache="loaded")
            phases.append("compiled graphs loaded from the compile cache")
        if match := ENGINE_INIT.search(line):
            phases.append(f"engine initialised in {match[1]} s")
        if match := SERVER_UP.search(line):
            phases.append(f"server starting on {match[1]}")
        with self._lock:
            new = [phase for phase in phases if phase not in self._reported]
            self._reported.update(new)
        return new


def observed_in(lines: Iterable[str]) -> Observed:
    """What a whole vLLM log (its lines, as vLLM printed them) says."""
    watcher = LogWatcher()
    for line in lines:
        watcher.feed(line)
    return watcher.snapshot()
