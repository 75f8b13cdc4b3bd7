"""Reading the table that `python -m bench.gateway_bench` prints, as GPU fixtures keep it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROW = re.compile(
    r"^\s*(\d+)\s+(standalone|embedded)\s+(standalone|embedded|direct)\s+"
    r"([\d.]+)ms\s+([\d.]+)ms\s+([\d.]+)(.*)$"
)
RATIO = re.compile(r"([\d.]+) \[([\d.]+), ([\d.]+)\]")
METRICS = ("ttft_p50", "ttft_p99", "tokens_per_s")


def table_rows(path: Path) -> dict[tuple[int, str, str], dict[str, Any]]:
    """(streams, phase, path) -> TTFT p50 in ms and, for a gateway path, each ratio to
    its phase's direct path as (value, low, high)."""
    rows: dict[tuple[int, str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        found = ROW.match(line)
        if not found:
            continue
        streams, phase, way, p50, _p99, _tps, rest = found.groups()
        ratios = [tuple(float(x) for x in r) for r in RATIO.findall(rest)]
        rows[(int(streams), phase, way)] = {
            "ttft_p50_ms": float(p50),
            "ratios": dict(zip(METRICS, ratios, strict=True)) if ratios else {},
        }
    return rows
