"""Byte units and vLLM-style size parsing.

Sizes on the command line follow vllm/utils/argparse_utils.py `human_readable_int`:
upper-case K/M/G/T are binary (`40G` = 40 GiB), lower-case k/m/g/t decimal
(`40g` = 40·10⁹), and decimals are allowed with decimal suffixes only.
"""

from __future__ import annotations

import re

from budget.errors import BudgetError

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1000**3
_BINARY = {"K": KiB, "M": MiB, "G": GiB, "T": 1024**4}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)")


def parse_bytes(text: str, what: str) -> int:
    """Parse `40G` (GiB), `40g` (10⁹), `1.5g`, `1073741824` into bytes, as vLLM does."""
    match = _SIZE_RE.fullmatch(str(text).strip())
    if not match:
        raise BudgetError(f"{what}={text!r}; expected bytes like 1073741824, 512M or 40G")
    number, suffix = match.groups()
    if suffix in _BINARY and "." in number:
        raise BudgetError(
            f"{what}={text!r}; decimals need a decimal suffix ({number}{suffix.lower()}), "
            f"as vLLM reads it"
        )
    if not suffix and "." in number:
        raise BudgetError(f"{what}={text!r}; a plain byte count must be a whole number")
    value = (
        int(float(number) * _DECIMAL[suffix])
        if suffix in _DECIMAL
        else int(number) * _BINARY.get(suffix, 1)
    )
    if value < 1:
        raise BudgetError(f"{what}={text!r}; must be at least 1 byte")
    return value


def gib(n_bytes: float) -> float:
    return n_bytes / GiB
