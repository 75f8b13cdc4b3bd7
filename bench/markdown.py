"""Small Markdown helpers: tables and number formatting (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DASH = "–"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def num(value: Any, digits: int = 1) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (isinstance(value, float) and digits == 0):
        return f"{round(value):,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def ms(seconds: Any) -> str:
    return DASH if seconds is None else f"{seconds * 1000:,.1f}"


def pct(fraction: Any) -> str:
    return DASH if fraction is None else f"{fraction * 100:.1f} %"


def dist_ms(
    summary: Mapping[str, Any] | None, keys: Sequence[str] = ("p50", "p95", "p99")
) -> list[str]:
    """Cells of a latency distribution in milliseconds."""
    if not summary:
        return [DASH for _ in keys]
    return [ms(summary.get(key)) for key in keys]


def value(value: Any) -> str:
    """A condition value for a table cell."""
    if value is None:
        return DASH
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or DASH
    return num(value, 2) if isinstance(value, float) else num(value)
