"""Starts that fail in a given vLLM release whatever the memory plan says, with the
public thread that tracks each (the entrypoint refuses them before launch where the
installed packages show the failure; the planner warns)."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from budget.model import ModelSpec
from budget.vllm_rules import release_reaches

# vLLM before 0.28.0 reads Gemma 4's `head_dim` off the text config
# (transformers_utils/model_arch_config_convertor.py Gemma4ModelArchConfigConvertor
# .get_head_size, 0.24.0). From transformers 5.15 Gemma 4's head size is a per-layer
# attribute and that read raises AmbiguousGlobalPerLayerAttributeError at start-up
# (vllm-project/vllm#51744; fixed by vllm-project/vllm#49797, in 0.28.0).
GEMMA4_FIXED_IN = (0, 28, 0)
GEMMA4_TRANSFORMERS_BREAKS = Version("5.15")
GEMMA4_THREAD = "vllm-project/vllm#51744"


def gemma4_head_dim_breaks(model: ModelSpec, vllm_version: str) -> bool:
    """A Gemma 4 model on a vLLM that reads its head size globally."""
    return model.gemma4 is not None and not release_reaches(vllm_version, GEMMA4_FIXED_IN)


def gemma4_warning(model: ModelSpec, vllm_version: str) -> str | None:
    if not gemma4_head_dim_breaks(model, vllm_version):
        return None
    return (
        f"vLLM {vllm_version} cannot start Gemma 4 with transformers ≥ 5.15 "
        f"(AmbiguousGlobalPerLayerAttributeError on 'head_dim', {GEMMA4_THREAD}): "
        "use transformers ≤ 5.14.1 or vLLM ≥ 0.28.0"
    )


def gemma4_refusal(model: ModelSpec, vllm_version: str, transformers: str | None) -> str | None:
    """The one-line refusal when the installed transformers is one that breaks it."""
    if transformers is None or not gemma4_head_dim_breaks(model, vllm_version):
        return None
    try:
        if Version(transformers).release[:2] < GEMMA4_TRANSFORMERS_BREAKS.release:
            return None
    except InvalidVersion:  # a build that does not say: the planner's warning stands
        return None
    return (
        f"model {model.name} ({model.architecture}) cannot start on vLLM {vllm_version} with "
        f"transformers {transformers}: vLLM before 0.28.0 reads Gemma 4's per-layer "
        f"'head_dim' globally, which transformers ≥ 5.15 refuses "
        f"(AmbiguousGlobalPerLayerAttributeError, {GEMMA4_THREAD}); install transformers "
        "5.14.1 or vLLM ≥ 0.28.0"
    )
