"""Scale-out planning: several nodes on Ray (TP/PP split chosen and explained)."""

from __future__ import annotations

from typing import Any

import pytest

from budget.errors import BudgetError
from budget.flags import vllm_args
from budget.options import PlanOptions
from budget.plan_dict import plan_dict
from budget.planner import build_plan


def test_fp8_flash_next_needs_two_sparks() -> None:
    one = build_plan(PlanOptions(weights_dtype="fp8"))
    assert not one.fits
    assert any(tip.startswith("--nodes 2") for tip in one.suggestions)
    two = build_plan(PlanOptions(weights_dtype="fp8", hardware="dgx-spark-x2"))
    assert two.fits
    args = vllm_args(two)
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert "ray" in two.components  # Ray's own memory on each node


def test_split_is_chosen_and_explained() -> None:
    plan = build_plan(PlanOptions(weights_dtype="fp8", nodes=2))
    s = plan.settings
    assert (s.tp, s.pp, s.nodes) == (2, 1, 2)
    assert plan.parallelism[0].startswith("chose TP 2 × PP 1")
    assert any("TP 1 × PP 2" in line for line in plan.parallelism[1:])
    assert plan_dict(plan)["parallelism"]["nodes"] == 2


def test_pipeline_stages_hold_fewer_layers() -> None:
    tp2 = build_plan(PlanOptions(weights_dtype="fp8", nodes=2, tp=2, pp=1))
    pp2 = build_plan(PlanOptions(weights_dtype="fp8", nodes=2, tp=1, pp=2))
    assert "--pipeline-parallel-size" in vllm_args(pp2)
    # per-rank decoder weights halve either way; PP's last stage carries the whole lm_head
    assert pp2.components["weights.lm_head"] == 2 * tp2.components["weights.lm_head"]
    assert "weights.embeddings" not in pp2.components
    # TP across a 25 GB/s link costs all-reduces, PP hand-offs: both appear in the estimate
    assert tp2.speed.comm_seconds_per_step > 0 and pp2.speed.comm_seconds_per_step > 0


def test_the_articles_27b_on_two_5060ti_uses_tp2() -> None:
    plan = build_plan(PlanOptions(model="qwen3.8-27b"))
    assert plan.settings.tp == 2 and plan.settings.hardware.name == "rtx-5060ti-16gb"
    assert plan.settings.kv_cache_dtype == "fp8"
    assert plan.speed.comm_seconds_per_step > 0  # PCIe all-reduces


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (PlanOptions(nodes=2, tp=1, pp=1), "every one of the 2 GPUs"),
        (PlanOptions(nodes=0), "nodes=0"),
        (PlanOptions(pp=0), "pp=0"),
    ],
)
def test_bad_splits_are_clear_errors(options: PlanOptions, message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        build_plan(options)


def test_multinode_flags_parse_in_vllm() -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser: Any = make_arg_parser(FlexibleArgumentParser())
    for options in (
        PlanOptions(weights_dtype="fp8", hardware="dgx-spark-x2"),
        PlanOptions(weights_dtype="fp8", nodes=2, tp=1, pp=2),
        PlanOptions(model="qwen3.8-27b"),
    ):
        plan = build_plan(options)
        ns = parser.parse_args(["--model", "/m", *vllm_args(plan)])
        assert ns.tensor_parallel_size == plan.settings.tp
        assert ns.pipeline_parallel_size == plan.settings.pp
        if plan.settings.nodes > 1:
            assert ns.distributed_executor_backend == "ray"
