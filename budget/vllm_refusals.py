"""Settings vLLM refuses once it has sized the KV pool, refused here before anything starts."""

from __future__ import annotations

import math

from budget.errors import BudgetError
from budget.plan import CUDA_CONTEXT_BYTES, Plan, start_free_bytes
from budget.units import GiB

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


def check_start_request(plan: Plan) -> None:
    """v1/worker/utils.py `request_memory` (0.24.0, 0.32.0): at start-up vLLM needs
    ceil(total × --gpu-memory-utilization) free on the GPU, measured once its own CUDA
    context exists; a fraction that asks for more than the GPU less that context is a
    ValueError ("Free memory on device … is less than desired GPU memory
    utilization") even with nothing else on the GPU."""
    s = plan.settings
    free = start_free_bytes(s)
    util = s.gpu_memory_utilization
    if free is None or util is None:
        return
    total = s.hardware.memory_bytes
    request = math.ceil(total * util)
    if request <= free:
        return
    most = math.floor(1000 * free / total) / 1000
    raise BudgetError(
        f"--gpu-memory-utilization {util:g} has vLLM's start-up check ask for "
        f"{request / GiB:.2f} GiB free of the GPU's {total / GiB:.2f} GiB, but at most "
        f"{free / GiB:.2f} GiB is free once vLLM's CUDA context ({CUDA_CONTEXT_BYTES / GiB:.2f} "
        f"GiB) exists, and vLLM refuses to start; give at most {most:g}"
    )


def check_refusals(plan: Plan) -> None:
    check_start_request(plan)
    check_mamba_blocks_for_full_graphs(plan)
