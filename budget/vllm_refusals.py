"""Settings vLLM refuses once it has sized the KV pool, refused here before anything starts."""

from __future__ import annotations

from budget.errors import BudgetError
from budget.plan import Plan

# config/compilation.py CUDAGraphMode.has_full_cudagraphs().
FULL_GRAPH_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def check_mamba_blocks_for_full_graphs(plan: Plan) -> None:
    """vllm 0.32 config/compilation.py (`_set_cudagraph_sizes` after KV sizing): with full
    CUDA graphs and mamba layers, each decode sequence needs a cache block, so
    max_num_seqs > num_blocks is a ValueError at start-up."""
    s = plan.settings
    blocks = plan.capacity.num_blocks
    if not (
        plan.fits
        and plan.model.is_hybrid
        and s.device == "cuda"
        and s.cudagraph_mode in FULL_GRAPH_MODES
        and s.max_num_seqs > blocks
    ):
        return
    raise BudgetError(
        f"max_num_seqs={s.max_num_seqs} exceeds the {blocks} KV blocks of this plan; with "
        f"cudagraph_mode={s.cudagraph_mode} each decode sequence of a hybrid needs a mamba "
        f"block and vLLM refuses to start: give --max-num-seqs ≤ {blocks}, "
        "--cudagraph-mode PIECEWISE, or a larger KV pool"
    )


def check_refusals(plan: Plan) -> None:
    check_mamba_blocks_for_full_graphs(plan)
