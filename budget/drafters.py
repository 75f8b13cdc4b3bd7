"""Which speculative decoding a plan is for, and the drafter directory it needs:
`--speculative-config`, else `--mtp K`, else the profile's MTP K (budget/speculative.py
parses vLLM's spelling)."""

from __future__ import annotations

from budget.errors import BudgetError
from budget.options import PlanOptions
from budget.profiles import ModelProfile
from budget.speculative import Speculation, resolve_speculation

# Architectures whose MTP module vLLM serves even when config.json does not count it.
MTP_ARCH_HINTS = ("Qwen3Next", "Qwen3_5")


def speculation_for(opts: PlanOptions, profile: ModelProfile) -> Speculation | None:
    """--speculative-config, else --mtp K, else the profile's MTP K."""
    k = opts.mtp
    if k is None and opts.speculative_config is None:
        k = int(profile.serving.get("mtp", 0))
    if k is not None and (k < 0 or k > 16):
        raise BudgetError(f"mtp={k}; must be between 0 (off) and 16")
    speculation = resolve_speculation(k, opts.speculative_config)
    spec = profile.spec
    if (
        speculation is not None
        and speculation.method == "mtp"
        and spec.mtp_layers == 0
        and not any(h in spec.architecture for h in MTP_ARCH_HINTS)
    ):
        raise BudgetError(
            f"mtp={speculation.num_speculative_tokens}; model {spec.name} ({spec.architecture}) "
            "has no MTP layers (num_nextn_predict_layers / mtp_num_hidden_layers); a "
            "separate drafter is --speculative-config with method eagle, eagle3, dflash "
            "or draft_model"
        )
    return speculation


def drafter_for(speculation: Speculation | None, draft: ModelProfile | None) -> ModelProfile | None:
    if speculation is None or not speculation.has_drafter:
        return None
    if draft is None:
        raise BudgetError(
            f"speculative_config method={speculation.method!r}: the drafter's directory "
            f"{speculation.model!r} was not loaded"
        )
    if draft.spec.is_hybrid:
        raise BudgetError(
            f"speculative_config model={speculation.model!r} is a hybrid "
            f"({draft.spec.architecture}); the planner sizes drafters of full-attention "
            "layers only"
        )
    return draft
