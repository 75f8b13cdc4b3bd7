"""The one exception base of the bench package; the CLI maps it to exit 2."""

from __future__ import annotations


class BenchError(Exception):
    """A bad option, an unreachable server or a failed launch; `str()` is one line."""


class LaunchError(BenchError):
    """The launched server exited or never became ready."""
