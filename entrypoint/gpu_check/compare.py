"""The plan against what vLLM logged: each figure, its difference, and a verdict.

Relative figures (KV pool, KV tokens, concurrency, weights) pass within their
tolerance: the targets docs/gpu-calibration.md holds the planner to (KV pool within
2 % of vLLM's `Available KV cache memory`, weights within 1 %); the block terms
(attention block, padding layers, blocks per request) must be exact, as
entrypoint/capacity.py compares them beyond the log's rounding. The CUDA-graph pool is
shown, never judged: the planner's figure is an estimate of a pool vLLM sizes after
capture.

So is the rest of the requested memory: what vLLM took off `--gpu-memory-utilization`
× the GPU's memory besides the weights, the KV pool and (where it says it subtracted
it) its CUDA-graph estimate. That is its profiling run's activation peak plus the memory
outside PyTorch (gpu_worker.py `determine_available_memory`), the planner's
`activation_peak` + `runtime`. A KV pool that misses while the weights match shows its
cause there. vLLM prints each term to 0.01 GiB, so the rest is good to about 0.02 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.plan import VLLM_ACCOUNTED, Plan
from budget.units import GiB
from entrypoint.calibration import planned_weights_bytes
from entrypoint.capacity import Term, capacity_terms
from entrypoint.logscan import Observed

KV_TOLERANCE = 0.02
WEIGHTS_TOLERANCE = 0.01
OK, DIFFERS, NOT_LOGGED, SHOWN = "ok", "differs", "not logged", "shown"
PROFILED_REST = "profiling peak + runtime"


@dataclass(frozen=True)
class Figure:
    """One planned figure beside vLLM's; `tolerance` relative, 0 = exact, None = shown only."""

    name: str
    unit: str  # "bytes", "tokens", "x", "count"
    planned: float | None
    observed: float | None
    tolerance: float | None
    matches: bool | None = None  # decided elsewhere (the log's rounding): overrides tolerance
    required: bool = False  # a check without it fails (vLLM's capacity line)

    @property
    def relative(self) -> float | None:
        if self.planned is None or self.observed is None or not self.planned:
            return None
        return self.observed / self.planned - 1

    @property
    def verdict(self) -> str:
        if self.observed is None:
            return NOT_LOGGED if self.tolerance is not None else SHOWN
        if self.matches is not None:
            return OK if self.matches else DIFFERS
        if self.tolerance is None or self.planned is None:
            return SHOWN
        if self.tolerance == 0:
            return OK if self.observed == self.planned else DIFFERS
        relative = self.relative
        return OK if relative is not None and abs(relative) <= self.tolerance else DIFFERS


def _exact(term: Term | None, name: str) -> Figure | None:
    if term is None:
        return None
    return Figure(name, "count", term.planned, term.observed, 0, matches=not term.differs)


def _block_terms(plan: Plan, seen: Observed) -> list[Figure]:
    """Block size, padding layers and blocks per request, as capacity.py reads them (vLLM
    logs the attention block only where it raises it, for hybrids)."""
    terms = {term.name: term for term in capacity_terms(plan, seen)}
    block = _exact(terms.get("block_size"), "attention block (tokens)")
    if seen.block_size is None:
        block = Figure("attention block (tokens)", "count", plan.layout.block_size, None, None)
    figures = [
        block,
        _exact(terms.get("padding_layers"), "padding layers"),
        _exact(terms.get("blocks_per_request"), "blocks per max_model_len request"),
    ]
    return [f for f in figures if f is not None]


def _profiled_rest(plan: Plan, seen: Observed) -> list[Figure]:
    """The requested memory (the plan's usable bytes: the GPU's memory × utilization)
    less weights, KV pool and the graph estimate vLLM applied; no row where no profiling
    run sizes the pool (a fixed pool, CPU, unified memory)."""
    s = plan.settings
    if plan.kv_mode != "utilization" or s.device != "cuda" or s.hardware.uma:
        return []
    requested = plan.usable_bytes
    planned = sum(v for k, v in plan.components.items() if k.startswith(VLLM_ACCOUNTED))
    planned -= planned_weights_bytes(plan) + plan.components.get("cudagraph_pool", 0)
    graphs = seen.cudagraph_estimate_bytes if seen.cudagraph_estimate_applied else 0
    observed = None
    if seen.weights_bytes is not None and seen.kv_cache_bytes is not None and graphs is not None:
        observed = requested - seen.weights_bytes - seen.kv_cache_bytes - graphs
    return [Figure(PROFILED_REST, "bytes", planned, observed, None)]


def figures(plan: Plan, seen: Observed) -> list[Figure]:
    """Every figure the plan and the log both speak of, in the order vLLM logs them."""
    graphs = plan.components.get("cudagraph_pool")
    return [
        Figure(
            "weights", "bytes", planned_weights_bytes(plan), seen.weights_bytes, WEIGHTS_TOLERANCE
        ),
        *_profiled_rest(plan, seen),
        Figure("KV pool", "bytes", plan.kv_cache_bytes, seen.kv_cache_bytes, KV_TOLERANCE),
        Figure(
            "KV cache tokens",
            "tokens",
            plan.kv_cache_tokens,
            seen.kv_cache_tokens,
            KV_TOLERANCE,
            required=True,
        ),
        Figure(
            "max concurrency",
            "x",
            plan.max_concurrency,
            seen.max_concurrency,
            KV_TOLERANCE,
            required=True,
        ),
        *_block_terms(plan, seen),
        Figure("CUDA graph pool", "bytes", graphs, seen.cudagraph_bytes, None),
    ]


def all_within(checked: list[Figure]) -> bool:
    """Every figure vLLM logged within its tolerance, and the required ones logged (vLLM
    on CPU logs neither its weights nor its pool)."""
    return all(
        f.verdict in (OK, SHOWN) or (f.verdict == NOT_LOGGED and not f.required) for f in checked
    )


def shown(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        return f"{value / GiB:.2f} GiB"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{int(value):,}"


def difference(figure: Figure) -> str:
    if figure.planned is None or figure.observed is None:
        return ""
    if figure.tolerance == 0 or figure.unit == "count":
        delta = figure.observed - figure.planned
        return "exact" if delta == 0 else f"{delta:+,.0f}"
    relative = figure.relative
    if relative is None:
        return ""
    return "exact" if abs(relative) < 5e-5 else f"{relative:+.2%}"
