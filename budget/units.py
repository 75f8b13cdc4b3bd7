"""Byte units and vLLM-style size parsing (`40G` = 40 GiB, as vLLM reads it)."""

from __future__ import annotations

import re

from budget.errors import BudgetError

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1000**3
# vllm/utils/argparse_utils.py human-readable ints: k/m/g/t are binary multiples.
_SUFFIX = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_bytes(text: str, what: str) -> int:
    """Parse `40G`, `512M`, `1.5g`, `1073741824` into bytes."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise BudgetError(f"{what}={text!r}; expected bytes like 1073741824, 512M or 40G")
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value < 1:
        raise BudgetError(f"{what}={text!r}; must be at least 1 byte")
    return int(value)


def gib(n_bytes: float) -> float:
    return n_bytes / GiB
