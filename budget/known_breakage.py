"""Starts that fail in a given vLLM release with some versions of another package,
whatever the memory plan says, with the public thread that tracks each (the entrypoint
refuses them before launch where the installed packages show the failure; the planner
warns)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from budget.mamba2 import GRANITE_4_H
from budget.model import ModelSpec
from budget.vllm_rules import release_reaches


@dataclass(frozen=True)
class Breakage:
    """A model family that a vLLM release before `fixed_in` cannot start when an installed
    `package` is one of the versions in `breaks` (compared on the release numbers)."""

    applies: Callable[[ModelSpec], bool]
    family: str
    fixed_in: tuple[int, int, int]
    package: str  # its name on PyPI, as importlib.metadata reads it
    breaks: SpecifierSet
    breaking: str  # `breaks` in words, for the advice
    works: str  # the releases to install instead, named in the advice
    error: str  # what vLLM raises at start-up
    cause: str
    thread: str
    # The GPUs it happens on, by compute capability major ("9" for 9.0): None for all.
    sm_majors: frozenset[str] | None = None

    def applies_to(self, model: ModelSpec, vllm_version: str, sm: str) -> bool:
        return (
            self.applies(model)
            and not release_reaches(vllm_version, self.fixed_in)
            and (self.sm_majors is None or sm.split(".")[0] in self.sm_majors)
        )

    @property
    def fixed(self) -> str:
        return ".".join(str(p) for p in self.fixed_in)

    @property
    def remedy(self) -> str:
        return f"{self.package} {self.works} or vLLM ≥ {self.fixed}"

    def warning(self, model: ModelSpec, vllm_version: str, sm: str) -> str | None:
        if not self.applies_to(model, vllm_version, sm):
            return None
        return (
            f"vLLM {vllm_version} cannot start {self.family} with {self.package} "
            f"{self.breaking} ({self.error}, {self.thread}): use {self.remedy}"
        )

    def refusal(
        self, model: ModelSpec, vllm_version: str, sm: str, installed: str | None
    ) -> str | None:
        """The one-line refusal when the installed `package` is a version that breaks it."""
        if installed is None or not self.applies_to(model, vllm_version, sm):
            return None
        try:
            release = Version(".".join(str(n) for n in Version(installed).release))
        except InvalidVersion:  # a build that does not say: the planner's warning stands
            return None
        if release not in self.breaks:
            return None
        return (
            f"model {model.name} ({model.architecture}) cannot start on vLLM {vllm_version} "
            f"with {self.package} {installed}: {self.cause} ({self.error}, {self.thread}); "
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
    package="transformers",
    breaks=SpecifierSet(">=5.15"),
    breaking="≥ 5.15",
    works="5.14.1",
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
    package="transformers",
    breaks=SpecifierSet(">=5.13"),
    breaking="≥ 5.13",
    works="5.12.1",
    error="KeyError: 'linear_attention'",
    cause=(
        "transformers ≥ 5.13 renames Granite-4.0-H's layer types to 'linear_attention' / "
        "'full_attention', which vLLM before 0.26.0 does not know"
    ),
    thread="vllm-project/vllm#47634",
)

# On compute capability 9.x, 10.x and 11.x vLLM 0.24 runs every Gemma 4 layer on
# FlashAttention 4 (config.py Gemma4Config: the sliding and full head sizes differ;
# flash_attn_interface.py `_is_fa4_supported`; other GPUs get TRITON_ATTN), whose CuTe
# interface imports quack (vllm_flash_attn/cute/interface.py: `from quack.compile_utils
# import ...`). `import quack` fails in quack-kernels 0.3.10, 0.3.11 and 0.4.0: their
# rmsnorm.py, softmax.py and cross_entropy.py import `Arch` from `cutlass.base_dsl`, which
# nvidia-cutlass-dsl 4.5.2 (the pin of vLLM 0.23-0.25) and 4.6.0 (0.26) do not export there
# (vllm-project/vllm#47570; vllm-project/vllm#47571 names the releases). vLLM 0.23-0.25 ask
# for quack-kernels ≥ 0.3.3 and 0.26 for ≥ 0.4.0, so those three can be what is installed;
# 0.28.0 pins 0.6.4. 0.3.9 served Gemma 4 on vLLM 0.24.0
# (tests/budget/fixtures/gpu_h200_gemma/); 0.4.1 has no such import (checked in the wheels).
GEMMA4_QUACK_ARCH = Breakage(
    applies=lambda model: model.gemma4 is not None,
    family="Gemma 4",
    fixed_in=(0, 28, 0),
    package="quack-kernels",
    breaks=SpecifierSet(">=0.3.10,<0.4.1"),
    breaking="0.3.10 to 0.4.0",
    works="0.3.9 or ≥ 0.4.1",
    error="ImportError: cannot import name 'Arch' from 'cutlass.base_dsl'",
    cause=(
        "FlashAttention 4, which vLLM runs Gemma 4 on, imports quack, and these "
        "quack-kernels releases import a name nvidia-cutlass-dsl no longer exports"
    ),
    thread="vllm-project/vllm#47570",
    sm_majors=frozenset({"9", "10", "11"}),
)

KNOWN_BREAKAGE = (GEMMA4_HEAD_DIM, GRANITE_4_H_LAYER_TYPES, GEMMA4_QUACK_ARCH)

# The packages whose installed versions the entrypoint reads for `refusal`.
PACKAGES = tuple(dict.fromkeys(b.package for b in KNOWN_BREAKAGE))


def warnings(model: ModelSpec, vllm_version: str, sm: str) -> list[str]:
    """The planner's warnings: each start this release cannot make on a GPU of compute
    capability `sm` ("9.0"; "" where unknown) with some versions of another package."""
    return [w for b in KNOWN_BREAKAGE if (w := b.warning(model, vllm_version, sm)) is not None]


def refusal(
    model: ModelSpec, vllm_version: str, sm: str, installed: Mapping[str, str | None]
) -> str | None:
    """The entrypoint's one-line refusal where an installed package is known to fail it
    (`installed`: version by package name, None where it is not installed)."""
    for b in KNOWN_BREAKAGE:
        problem = b.refusal(model, vllm_version, sm, installed.get(b.package))
        if problem is not None:
            return problem
    return None
