"""Value parsers for the settings of `python -m budget plan` and `python -m entrypoint`.

Each takes the raw string and returns a typed value or raises ValueError whose
message says what is allowed; the caller adds the name of the flag or variable.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence

from budget.vllm_rules import parse_vllm_version

# vllm/utils/argparse_utils.py `human_readable_int`: lower-case suffixes are
# decimal (1k = 1,000), upper-case binary (1K = 1,024); no decimals with binary.
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_TRUE = ("on", "true", "1", "yes")
_FALSE = ("off", "false", "0", "no")


def human_int(raw: str) -> int:
    """`40G` = 40 GiB, `2k` = 2,000, `4096` = 4096 (vLLM's spelling)."""
    value = raw.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match is None:
        return _plain_int(value, "an integer, optionally with k/m/g/t (×1000) or K/M/G/T (×1024)")
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(f"decimals are not allowed with {suffix}; write {number}{suffix.lower()}")
    return int(number) * _BINARY[suffix]


def _plain_int(value: str, allowed: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"must be {allowed}") from None


def positive_int(raw: str) -> int:
    value = human_int(raw)
    if value < 1:
        raise ValueError("must be ≥ 1")
    return value


def byte_size(raw: str) -> int:
    """A positive byte count: `42949672960`, `40G` (GiB) or `40g` (10⁹)."""
    return positive_int(raw)


def non_negative_int(raw: str) -> int:
    value = _plain_int(raw.strip(), "an integer ≥ 0")
    if value < 0:
        raise ValueError("must be an integer ≥ 0")
    return value


def nice(raw: str) -> int:
    """A nice value that lowers priority: 0 (unchanged) to 19 (lowest)."""
    value = _plain_int(raw.strip(), "an integer 0-19")
    if not 0 <= value <= 19:
        raise ValueError("must be an integer 0-19 (0 leaves the priority as it is)")
    return value


def port(raw: str) -> int:
    value = _plain_int(raw.strip(), "an integer 1-65535")
    if not 1 <= value <= 65535:
        raise ValueError("must be an integer 1-65535")
    return value


def _number(raw: str, ok: Callable[[float], bool], allowed: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"must be {allowed}") from None
    if not ok(value):  # NaN fails every check
        raise ValueError(f"must be {allowed}")
    return value


def positive_seconds(raw: str) -> float:
    return _number(raw, lambda v: v > 0, "a number of seconds > 0")


def non_negative_seconds(raw: str) -> float:
    return _number(raw, lambda v: v >= 0 and v != float("inf"), "a number of seconds >= 0")


def positive_number(raw: str) -> float:
    return _number(raw, lambda v: v > 0, "a number > 0")


def fraction(raw: str) -> float:
    return _number(raw, lambda v: 0 < v <= 1, "a number in (0, 1]")


def share(raw: str) -> float:
    """A fraction that may be 0: a number in [0, 1]."""
    return _number(raw, lambda v: 0 <= v <= 1, "a number in [0, 1]")


def switch(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("must be on or off (yes/no, true/false and 1/0 too)")


def switch_or_count(raw: str) -> bool | int:
    """on/off (as `switch`), or a positive whole number."""
    value = raw.strip().replace(",", "").replace("_", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return switch(raw)
    except ValueError:
        raise ValueError("must be on, off or a positive whole number of rows") from None


def text(raw: str) -> str:
    return raw.strip()


def word(raw: str) -> str:
    """One word of letters, digits, `_`, `-` or `.` (a name such as vLLM's load formats)."""
    value = raw.strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ValueError("must be one word of letters, digits, '_', '-' or '.'")
    return value


def argv_words(raw: str) -> tuple[str, ...]:
    """Shell words, as `shlex.split` reads them: `--enforce-eager --seed 1`."""
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise ValueError(f"must be shell words ({exc})") from None


def int_list(raw: str) -> tuple[int, ...]:
    """`4,8,12,16` → (4, 8, 12, 16)."""
    try:
        values = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise ValueError("must be a comma list of integers, e.g. 4,8,12,16") from None
    if not values or min(values) < 1:
        raise ValueError("must be a comma list of integers ≥ 1, e.g. 4,8,12,16")
    return values


def vllm_version(raw: str) -> str:
    """A vLLM version as vLLM reports it (`vllm.__version__`), checked by `packaging`."""
    parse_vllm_version(raw)
    return raw.strip()


def choice(allowed: Sequence[str], *, fold_case: bool = False) -> Callable[[str], str]:
    """A parser accepting one of `allowed` (upper-cased first when fold_case)."""

    def parse(raw: str) -> str:
        value = raw.strip().upper() if fold_case else raw.strip()
        if value not in allowed:
            raise ValueError(f"must be one of {'|'.join(allowed)}")
        return value

    return parse
