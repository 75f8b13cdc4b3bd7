"""GDN prefill backend: avoid FlashInfer's minutes-long JIT on the first GPU start.

On cuda, vLLM's GDN (gated delta net) prefill of Qwen3-Next / Qwen3.5 defaults to
FlashInfer's kernel, compiled just in time on first start (minutes; DESIGN §3,
shared/gpu/README.md). `--gdn-prefill-backend triton` (vllm/engine/arg_utils.py)
avoids it. The entrypoint adds it for GDN models on cuda when the installed vLLM's
parser knows the flag and SPARKSERVE_VLLM_EXTRA_ARGS does not set it (theirs wins).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from budget.plan import Plan
from entrypoint.planning import Launch
from entrypoint.vllm_flags import flag_name

GDN_PREFILL_FLAG = "--gdn-prefill-backend"
GDN_PREFILL_BACKEND = "triton"
WHY = "FlashInfer's GDN prefill kernel is compiled just in time: minutes on first start"


@dataclass(frozen=True)
class Choice:
    """The args to add (maybe none) and the line saying so (None: nothing to say)."""

    args: tuple[str, ...]
    message: str | None


def needs_choice(plan: Plan) -> bool:
    return plan.model.is_hybrid and plan.settings.device == "cuda"


def user_sets_it(extra_args: Collection[str]) -> bool:
    return any(flag_name(word) == GDN_PREFILL_FLAG for word in extra_args)


def choose(plan: Plan, extra_args: Collection[str], known_flags: Collection[str] | None) -> Choice:
    """`known_flags`: the installed vLLM's serve flags; None when not looked up (--dry-run)."""
    if not needs_choice(plan):
        return Choice((), None)
    if user_sets_it(extra_args):
        return Choice(
            (), f"GDN prefill backend: {GDN_PREFILL_FLAG} from SPARKSERVE_VLLM_EXTRA_ARGS"
        )
    wanted = (GDN_PREFILL_FLAG, GDN_PREFILL_BACKEND)
    if known_flags is None:
        return Choice(
            (), f"GDN model on cuda: {' '.join(wanted)} is added at start if vLLM knows it"
        )
    if GDN_PREFILL_FLAG not in known_flags:
        return Choice((), f"warning: this vLLM has no {GDN_PREFILL_FLAG}; {WHY}")
    return Choice(
        wanted,
        f"GDN model on cuda: adding {' '.join(wanted)} ({WHY}; "
        f"SPARKSERVE_VLLM_EXTRA_ARGS='{GDN_PREFILL_FLAG} …' chooses another)",
    )


def apply(launch: Launch, choice: Choice) -> Launch:
    """The launch with the chosen args after the plan's (the user's extra args stay last)."""
    if not choice.args:
        return launch
    return replace(launch, planned_args=(*launch.planned_args, *choice.args))
