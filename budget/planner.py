"""The planner's entry point: options → resolved settings → the plan, its split across
nodes, its warnings and, when it does not fit, what to change."""

from __future__ import annotations

from budget.advice import suggestions_for, warnings_for
from budget.options import HostFacts, PlanOptions
from budget.plan import Plan, plan_for
from budget.profiles import load_model
from budget.settings import resolve
from budget.split import choose_split


def build_plan(options: PlanOptions, host: HostFacts | None = None) -> Plan:
    """Resolve the options, size everything, and add suggestions when it does not fit.
    `host` is what the caller probed of the machine (`budget.host.probe_host`)."""
    profile = load_model(options.model)
    settings = resolve(options, profile, host or HostFacts())
    if settings.nodes > 1 and options.tp is None and options.pp is None:
        plan = choose_split(profile, settings, options.mtp_acceptance)
    else:
        plan = plan_for(profile, settings, options.mtp_acceptance)
    plan.warnings = warnings_for(plan)
    if not plan.fits:
        plan.suggestions = suggestions_for(profile, settings, plan)
    return plan
