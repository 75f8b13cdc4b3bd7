"""Planned vs observed: the plan's numbers next to what vLLM logged."""

from __future__ import annotations

from dataclasses import dataclass

from budget.plan import Plan
from budget.units import GiB
from entrypoint.logscan import Observed

WEIGHT_COMPONENTS = ("weights.", "mtp_module", "draft_vocab_slice")


@dataclass(frozen=True)
class Row:
    name: str
    planned: float | None
    observed: float | None
    unit: str  # "tokens", "x", "GiB"


def planned_weights_bytes(plan: Plan) -> int:
    """What `Model loading took X GiB` should say: all loaded weights."""
    return sum(v for k, v in plan.components.items() if k.startswith(WEIGHT_COMPONENTS))


def _gib(value: int | None) -> float | None:
    return None if value is None else value / GiB


def rows(plan: Plan, observed: Observed) -> list[Row]:
    graphs = plan.components.get("cudagraph_pool")
    return [
        Row("KV cache tokens", plan.kv_cache_tokens, observed.kv_cache_tokens, "tokens"),
        Row("max concurrency", plan.max_concurrency, observed.max_concurrency, "x"),
        Row("KV cache memory", _gib(plan.kv_cache_bytes), _gib(observed.kv_cache_bytes), "GiB"),
        Row("weights", _gib(planned_weights_bytes(plan)), _gib(observed.weights_bytes), "GiB"),
        Row("CUDA graphs", _gib(graphs), _gib(observed.cudagraph_bytes), "GiB"),
    ]


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "tokens":
        return f"{int(value):,}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.2f} GiB"


def _delta(row: Row) -> str:
    if row.planned is None or row.observed is None or not row.planned:
        return ""
    change = (row.observed - row.planned) / row.planned * 100
    return "exact" if abs(change) < 0.005 else f"{change:+.1f} %"


def render(plan: Plan, observed: Observed) -> str:
    """A small table; rows where neither side has a value are left out."""
    lines = [f"{'calibration':<18}{'planned':>18}{'observed':>18}  delta"]
    for row in rows(plan, observed):
        if row.planned is None and row.observed is None:
            continue
        lines.append(
            f"{row.name:<18}{_fmt(row.planned, row.unit):>18}"
            f"{_fmt(row.observed, row.unit):>18}  {_delta(row)}"
        )
    return "\n".join(lines)
