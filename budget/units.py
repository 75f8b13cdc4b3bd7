"""Byte units (sizes given as text are read by `budget.parsers.byte_size`, as vLLM does)."""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1000**3


def gib(n_bytes: float) -> float:
    return n_bytes / GiB
