"""The planner's flags are accepted by the installed vLLM's own argument parser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from budget.flags import vllm_args
from budget.options import PlanOptions
from budget.planner import build_plan


@pytest.fixture(scope="module")
def vllm_parser() -> Any:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


@pytest.mark.parametrize(
    "options",
    [
        PlanOptions(),
        PlanOptions(
            model="qwen3-next-80b-a3b",
            hardware="h200",
            kv_cache_dtype="fp8",
            mtp=2,
            cudagraph_mode="FULL_AND_PIECEWISE",
        ),
        PlanOptions(
            model="llama-3.1-8b",
            hardware="rtx-5090",
            max_model_len=16384,
            tp=2,
            block_size=32,
            prefix_caching=False,
        ),
        PlanOptions(
            model="qwen3-30b-a3b",
            device="cpu",
            memory_gib=16,
            max_model_len=8192,
            kv_cache_memory_bytes=1 << 30,
        ),
    ],
)
def test_args_parse_and_mean_what_the_plan_says(vllm_parser: Any, options: PlanOptions) -> None:
    plan = build_plan(options)
    ns = vllm_parser.parse_args(["--model", "/m", *vllm_args(plan)])
    s = plan.settings
    assert ns.max_model_len == s.max_model_len
    assert ns.max_num_seqs == s.max_num_seqs
    assert ns.max_num_batched_tokens == s.max_num_batched_tokens
    assert ns.enable_prefix_caching is s.prefix_caching
    assert ns.enable_prompt_tokens_details is True
    if plan.kv_mode == "utilization":
        assert ns.gpu_memory_utilization == pytest.approx(plan.gpu_memory_utilization)
    else:
        assert ns.kv_cache_memory_bytes == plan.kv_cache_bytes
    if s.mtp:
        spec = ns.speculative_config
        spec = json.loads(spec) if isinstance(spec, str) else spec
        assert spec == {"method": "mtp", "num_speculative_tokens": s.mtp}
    if s.device == "cuda":
        comp = ns.compilation_config
        mode = getattr(comp, "cudagraph_mode", None) or comp["cudagraph_mode"]
        assert str(mode).endswith(s.cudagraph_mode)
    assert ns.tensor_parallel_size == s.tp
