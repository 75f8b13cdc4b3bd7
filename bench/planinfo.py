"""The budget plan for a set of SPARKSERVE_* settings (what the entrypoint will compute).

Only the settings the planner takes; the entrypoint also detects the machine, so
the planned KV tokens may differ from vLLM's logged ones when the KV pool is not
fixed — the report shows both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budget.errors import BudgetError
from budget.options import SETTINGS, PlanOptions
from budget.plan_dict import plan_dict
from budget.planner import build_plan


def plan_options(env: Mapping[str, str]) -> PlanOptions:
    """The planner settings among `env`'s SPARKSERVE_* variables, read as the entrypoint
    reads them."""
    given = {
        s.name: s.parse(env[s.env]) for s in SETTINGS if s.entrypoint and env.get(s.env, "").strip()
    }
    return PlanOptions(**given)


def plan_for(env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """(plan JSON, None) or (None, why there is none)."""
    try:
        plan = build_plan(plan_options(env))
    except (BudgetError, ValueError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return plan_dict(plan), None
