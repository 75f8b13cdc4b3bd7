"""GDN prefill backend: avoid FlashInfer's minutes-long JIT on the first GPU start.

On cuda, vLLM's GDN (gated delta net) prefill of Qwen3-Next / Qwen3.5 defaults to
FlashInfer's kernel, compiled just in time on first start (minutes;
docs/gpu-entrypoint.md). `--gdn-prefill-backend triton` (vllm/engine/arg_utils.py)
avoids it. The entrypoint plans GDN models on cuda with SPARKSERVE_GDN_PREFILL_BACKEND,
else the backend SPARKSERVE_VLLM_EXTRA_ARGS gives (theirs wins), else triton
(entrypoint/planning.py), so the plan's KV blocks are those vLLM builds (FlashInfer's
prefill aligns them to 64 tokens on vLLM 0.33+). The plan carries the flag; a vLLM whose
parser does not know it gets a warning and no flag.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from budget.plan import Plan
from entrypoint.planning import DEFAULT_GDN_PREFILL_BACKEND, GDN_PREFILL_FLAG, Launch
from entrypoint.vllm_flags import flag_name, without_flag

GDN_PREFILL_BACKEND = DEFAULT_GDN_PREFILL_BACKEND
WHY = "FlashInfer's GDN prefill kernel is compiled just in time: minutes on first start"


@dataclass(frozen=True)
class Choice:
    """The args to add (maybe none) and the line saying so (None: nothing to say)."""

    args: tuple[str, ...]
    message: str | None
    drop: bool = False  # take the plan's flag out (this vLLM does not know it)


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
    if plan.settings.gdn_prefill_backend is not None:
        return _planned(plan.settings.gdn_prefill_backend, known_flags)
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


def _planned(backend: str, known_flags: Collection[str] | None) -> Choice:
    """The plan already carries `--gdn-prefill-backend backend` (and its KV follows it)."""
    if known_flags is not None and GDN_PREFILL_FLAG not in known_flags:
        return Choice((), f"warning: this vLLM has no {GDN_PREFILL_FLAG}; {WHY}", drop=True)
    why = WHY if backend == GDN_PREFILL_BACKEND else "SPARKSERVE_GDN_PREFILL_BACKEND"
    return Choice(
        (),
        f"GDN model on cuda: {GDN_PREFILL_FLAG} {backend}, planned with it ({why}; "
        f"SPARKSERVE_GDN_PREFILL_BACKEND chooses another)",
    )


def apply(launch: Launch, choice: Choice) -> Launch:
    """The launch with the chosen args after the plan's (the user's extra args stay last)."""
    if choice.drop:
        return replace(launch, planned_args=without_flag(launch.planned_args, GDN_PREFILL_FLAG))
    if not choice.args:
        return launch
    return replace(launch, planned_args=(*launch.planned_args, *choice.args))
