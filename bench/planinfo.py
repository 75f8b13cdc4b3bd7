"""The budget plan for a set of SPARKSERVE_* settings (what the entrypoint will compute).

Only the settings the planner takes; the entrypoint also detects the machine, so
the planned KV tokens may differ from vLLM's logged ones when the KV pool is not
fixed — the report shows both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from budget.errors import BudgetError
from budget.options import PlanOptions
from budget.plan import build_plan
from budget.units import parse_bytes

ON = ("on", "true", "1", "yes")
FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "SPARKSERVE_HARDWARE": ("hardware", str),
    "SPARKSERVE_DEVICE": ("device", str),
    "SPARKSERVE_TP": ("tp", int),
    "SPARKSERVE_MAX_MODEL_LEN": ("max_model_len", int),
    "SPARKSERVE_MAX_NUM_SEQS": ("max_num_seqs", int),
    "SPARKSERVE_MAX_NUM_BATCHED_TOKENS": ("max_num_batched_tokens", int),
    "SPARKSERVE_MTP": ("mtp", int),
    "SPARKSERVE_KV_CACHE_MEMORY_BYTES": (
        "kv_cache_memory_bytes",
        lambda raw: parse_bytes(raw, "SPARKSERVE_KV_CACHE_MEMORY_BYTES"),
    ),
    "SPARKSERVE_KV_CACHE_DTYPE": ("kv_cache_dtype", str),
    "SPARKSERVE_PREFIX_CACHING": ("prefix_caching", lambda raw: raw.lower() in ON),
    "SPARKSERVE_CUDAGRAPH_MODE": ("cudagraph_mode", str.upper),
    "SPARKSERVE_SERVED_MODEL_NAME": ("served_model_name", str),
}


def plan_options(env: Mapping[str, str]) -> PlanOptions:
    kwargs: dict[str, Any] = {"model": env.get("SPARKSERVE_MODEL", PlanOptions.model)}
    for var, (name, parse) in FIELDS.items():
        raw = env.get(var, "").strip()
        if raw:
            kwargs[name] = parse(raw)
    return PlanOptions(**kwargs)


def plan_for(env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """(plan JSON, None) or (None, why there is none)."""
    try:
        plan = build_plan(plan_options(env))
    except (BudgetError, ValueError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return plan.to_dict(), None
