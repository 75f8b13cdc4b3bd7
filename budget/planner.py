"""The planner's entry point: options → resolved settings → the plan, its split across
nodes, its warnings and, when it does not fit, what to change."""

from __future__ import annotations

from pathlib import Path

from budget.advice import suggestions_for, warnings_for
from budget.errors import BudgetError
from budget.options import HostFacts, PlanOptions
from budget.plan import Plan, plan_for
from budget.profiles import ModelProfile, load_model, load_model_dir
from budget.settings import Settings, resolve
from budget.speculative import from_config
from budget.split import choose_split
from budget.vllm_refusals import check_refusals


def load_drafter(options: PlanOptions, read_weights: bool = True) -> ModelProfile | None:
    """The EAGLE / DFlash / draft model directory the speculative config names."""
    if options.speculative_config is None:
        return None
    speculation = from_config(options.speculative_config)
    if not speculation.has_drafter or speculation.model is None:
        return None
    directory = Path(speculation.model)
    if not directory.is_dir():
        raise BudgetError(
            f"speculative_config model={speculation.model!r} is not a directory; the "
            "planner reads the drafter's config.json and weights from one (download it)"
        )
    return load_model_dir(directory, read_weights)


def build_plan(
    options: PlanOptions, host: HostFacts | None = None, read_weights: bool = True
) -> Plan:
    """Resolve the options, size everything, and add suggestions when it does not fit.
    `host` is what the caller probed of the machine (`budget.host.probe_host`);
    `read_weights` off (vLLM's `--load-format dummy`) sizes weights from config.json."""
    profile, settings = resolve_options(options, host, read_weights)
    return finish_plan(profile, settings, options)


def resolve_options(
    options: PlanOptions, host: HostFacts | None = None, read_weights: bool = True
) -> tuple[ModelProfile, Settings]:
    """The model profile and the resolved settings (what `build_plan` plans)."""
    profile = load_model(options.model, read_weights)
    drafter = load_drafter(options, read_weights)
    return profile, resolve(options, profile, host or HostFacts(), drafter)


def finish_plan(profile: ModelProfile, settings: Settings, options: PlanOptions) -> Plan:
    """The plan for resolved settings, its split across nodes, refusals, warnings and,
    when it does not fit, what to change."""
    if settings.nodes > 1 and options.tp is None and options.pp is None:
        plan = choose_split(profile, settings, options.mtp_acceptance)
    else:
        plan = plan_for(profile, settings, options.mtp_acceptance)
    check_refusals(plan)
    plan.warnings = warnings_for(plan)
    if not plan.fits:
        plan.suggestions = suggestions_for(profile, settings, plan)
    return plan
