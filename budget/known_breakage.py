"""Starts that fail in a given vLLM release whatever the memory plan says, with the
public thread that tracks each (the entrypoint refuses them before launch where the
installed packages show the failure; the planner warns)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from budget.mamba2 import GRANITE_4_H
from budget.model import ModelSpec
from budget.vllm_rules import release_reaches


@dataclass(frozen=True)
class Breakage:
    """A model family that a vLLM release before `fixed_in` cannot build once
    transformers is at `transformers_breaks` or later."""

    applies: Callable[[ModelSpec], bool]
    family: str
    fixed_in: tuple[int, int, int]
    transformers_breaks: Version
    transformers_works: str  # the last release before the break, named in the advice
    error: str  # what vLLM raises at start-up
    cause: str
    thread: str

    def breaks(self, model: ModelSpec, vllm_version: str) -> bool:
        return self.applies(model) and not release_reaches(vllm_version, self.fixed_in)

    @property
    def fixed(self) -> str:
        return ".".join(str(p) for p in self.fixed_in)

    @property
    def remedy(self) -> str:
        return f"transformers {self.transformers_works} or vLLM ≥ {self.fixed}"

    def warning(self, model: ModelSpec, vllm_version: str) -> str | None:
        if not self.breaks(model, vllm_version):
            return None
        return (
            f"vLLM {vllm_version} cannot start {self.family} with transformers ≥ "
            f"{self.transformers_breaks} ({self.error}, {self.thread}): use {self.remedy}"
        )

    def refusal(self, model: ModelSpec, vllm_version: str, transformers: str | None) -> str | None:
        """The one-line refusal when the installed transformers is one that breaks it."""
        if transformers is None or not self.breaks(model, vllm_version):
            return None
        try:
            if Version(transformers).release < self.transformers_breaks.release:
                return None
        except InvalidVersion:  # a build that does not say: the planner's warning stands
            return None
        return (
            f"model {model.name} ({model.architecture}) cannot start on vLLM {vllm_version} "
            f"with transformers {transformers}: {self.cause} ({self.error}, {self.thread}); "
            f"install {self.remedy}"
        )


# vLLM before 0.28.0 reads Gemma 4's `head_dim` off the text config
# (transformers_utils/model_arch_config_convertor.py Gemma4ModelArchConfigConvertor
# .get_head_size, 0.24.0). From transformers 5.15 Gemma 4's head size is a per-layer
# attribute and that read raises AmbiguousGlobalPerLayerAttributeError at start-up
# (vllm-project/vllm#51744; fixed by vllm-project/vllm#49797, in 0.28.0).
GEMMA4_HEAD_DIM = Breakage(
    applies=lambda model: model.gemma4 is not None,
    family="Gemma 4",
    fixed_in=(0, 28, 0),
    transformers_breaks=Version("5.15"),
    transformers_works="5.14.1",
    error="AmbiguousGlobalPerLayerAttributeError on 'head_dim'",
    cause=(
        "vLLM before 0.28.0 reads Gemma 4's per-layer 'head_dim' globally, "
        "which transformers ≥ 5.15 refuses"
    ),
    thread="vllm-project/vllm#51744",
)

# From transformers 5.13.0 GraniteMoeHybridConfig rewrites the checkpoint's `layer_types`
# "mamba" / "attention" to "linear_attention" / "full_attention" on load
# (configuration_utils.py `remap_legacy_layer_types`). vLLM before 0.26.0 looks each
# layer up under the old names only (granitemoehybrid.py `ALL_DECODER_LAYER_TYPES`,
# 0.24.0 and 0.25.1) and stops with KeyError: 'linear_attention'; 0.26.0 keys both
# (vllm-project/vllm#47634 describes the failure).
GRANITE_4_H_LAYER_TYPES = Breakage(
    applies=lambda model: model.architecture == GRANITE_4_H,
    family="Granite-4.0-H",
    fixed_in=(0, 26, 0),
    transformers_breaks=Version("5.13"),
    transformers_works="5.12.1",
    error="KeyError: 'linear_attention'",
    cause=(
        "transformers ≥ 5.13 renames Granite-4.0-H's layer types to 'linear_attention' / "
        "'full_attention', which vLLM before 0.26.0 does not know"
    ),
    thread="vllm-project/vllm#47634",
)

KNOWN_BREAKAGE = (GEMMA4_HEAD_DIM, GRANITE_4_H_LAYER_TYPES)


def warnings(model: ModelSpec, vllm_version: str) -> list[str]:
    """The planner's warnings: each start this release cannot make with a recent transformers."""
    return [w for b in KNOWN_BREAKAGE if (w := b.warning(model, vllm_version)) is not None]


def refusal(model: ModelSpec, vllm_version: str, transformers: str | None) -> str | None:
    """The entrypoint's one-line refusal where the installed pair is known to fail."""
    for b in KNOWN_BREAKAGE:
        if (problem := b.refusal(model, vllm_version, transformers)) is not None:
            return problem
    return None
