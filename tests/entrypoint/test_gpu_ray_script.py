"""tools/ray_tp2.sh, the GPU run of the head role through Ray, checked here.

The script's SPARKSERVE_* settings are read out of the script itself and given to the
entrypoint's own config, planner, head launch and vLLM flag check, so a setting that
drifts (or a head that would wait for too few GPUs) fails here before a device call.
"""

import re
from pathlib import Path

import pytest

from budget.planner import build_plan
from entrypoint.config import load_config
from entrypoint.gpu_check.models import write_profile_model
from entrypoint.hardware import HostMemory, Machine
from entrypoint.planning import build_launch, plan_options
from entrypoint.ray_cluster import Expected, ray_launch
from entrypoint.roles import expected_cluster, for_head
from entrypoint.vllm_flags import check_flags, vllm_parser

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "ray_tp2.sh"
EXPORT = re.compile(r'^\s*export (SPARKSERVE_\w+)=(?:"([^"]*)"|(\S*))\s*$')
# What the script's shell fills in: TP on two GPUs, and the start-up deadline.
SHELL = {"$TP": "2", "$DEADLINE_S": "420"}
H200_X2 = Machine(
    device="cuda",
    gpu_name="NVIDIA H200",
    gpu_count=2,
    profile="h200",
    memory_gib=140.4,
    uma=False,
    host=HostMemory(total_bytes=256 << 30, available_bytes=250 << 30, free_bytes=240 << 30),
)


def script_settings(text: str) -> dict[str, str]:
    """The `export SPARKSERVE_…=…` lines of head_settings(), with the shell's values."""
    body = text.split("head_settings() {", 1)[1].split("\n}", 1)[0]
    settings = {}
    for line in body.splitlines():
        if match := EXPORT.match(line):
            value = match[2] if match[2] is not None else match[3]
            settings[match[1]] = SHELL.get(value, value)
    return settings


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """Config, plan and vLLM launch of the script's head, its model written here."""
    settings = script_settings(SCRIPT.read_text())
    models = tmp_path_factory.mktemp("gpumodels")
    write_profile_model("llama-3.1-8b", models / "dense")
    settings["SPARKSERVE_MODEL"] = settings["SPARKSERVE_MODEL"].replace(
        "/tmp/gpumodels", str(models)
    )
    config = load_config(settings)
    plan = build_plan(plan_options(config, H200_X2))
    return config, plan, for_head(build_launch(config, plan), config)


def test_the_script_sets_a_head_on_an_h200_with_tp_2():
    settings = script_settings(SCRIPT.read_text())
    assert settings["SPARKSERVE_ROLE"] == "head"
    assert settings["SPARKSERVE_HARDWARE"] == "h200"
    assert settings["SPARKSERVE_TP"] == "2"
    assert settings["SPARKSERVE_VLLM_EXTRA_ARGS"] == "--load-format dummy"


def test_the_head_launches_vllm_through_ray_with_tp_2_on_dummy_weights(head):
    config, _, launch = head
    argv = launch.argv
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert launch.env["RAY_ADDRESS"] == f"127.0.0.1:{config.ray_port}"
    assert check_flags(launch.planned_args, launch.extra_args, vllm_parser())


def test_the_head_waits_for_both_gpus_of_the_two_ranks(head):
    _, plan, _ = head
    assert (plan.settings.tp, plan.settings.nodes) == (2, 1)
    assert expected_cluster(plan) == Expected(nodes=1, gpus=2)


def test_ray_starts_as_head_without_dashboard(head):
    config, _, _ = head
    argv = ray_launch(config).argv
    assert argv[1:5] == ("start", "--head", "--port", "6379")
    assert "--include-dashboard=false" in argv


def test_nvlink_multicast_stays_off_for_the_entrypoint_ray_and_vllm():
    text = SCRIPT.read_text()
    exported = text.split("\nstage() {", 1)[0]  # top level: before any function runs
    off = ("NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1")
    for name in off:
        assert re.search(rf"^export .*\b{name}\b", exported, re.MULTILINE), name
    copied = re.search(r"^export VLLM_RAY_EXTRA_ENV_VARS_TO_COPY=(\S+)", exported, re.MULTILINE)
    assert copied is not None
    assert {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"} <= set(copied[1].split(","))
