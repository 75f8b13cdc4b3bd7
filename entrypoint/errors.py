"""The one exception base of the entrypoint; `cli.main` turns it into an exit code.

Exit codes (README, docs/entrypoint.md): 0 requested stop, 1 the plan does not fit,
2 bad configuration, 3 vLLM exited, died or never became healthy after start (or, on a
Ray cluster, Ray did: nodes missing, head gone), 4 the memory watchdog stopped vLLM
(available memory stayed under SPARKSERVE_MEMORY_FLOOR_GIB: entrypoint/watchdog.py).
"""

from __future__ import annotations

EXIT_STOPPED = 0
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_CONFIG = 2
EXIT_VLLM_FAILED = 3
EXIT_MEMORY_LOW = 4


class EntrypointError(Exception):
    """A failure the entrypoint reports as one line and an exit code."""

    exit_code = EXIT_BAD_CONFIG


class ConfigError(EntrypointError):
    """A SPARKSERVE_* value (or its flag) is malformed; the message names it."""


class PreflightError(EntrypointError):
    """A check before start failed: model unreadable, unknown flag, no GPU."""


class DoesNotFitError(EntrypointError):
    """The plan (or the memory free right now) is too small and SPARKSERVE_FORCE is off."""

    exit_code = EXIT_DOES_NOT_FIT


class VLLMFailedError(EntrypointError):
    """vLLM exited, died, or did not become healthy in time."""

    exit_code = EXIT_VLLM_FAILED


class RayError(EntrypointError):
    """Ray did not start, the cluster did not assemble in time, or this node lost the head."""

    exit_code = EXIT_VLLM_FAILED


class MemoryLowError(EntrypointError):
    """Available memory stayed under the floor: the watchdog stopped vLLM."""

    exit_code = EXIT_MEMORY_LOW
