"""What vLLM itself reports about CUDA-graph dispatch (`--cudagraph-metrics`).

With the flag, vLLM's logging stat logger prints, every VLLM_LOG_STATS_INTERVAL (10 s)
in which the engine was busy, one table of the steps it ran since the last one
(compilation/cuda_graph.py `CUDAGraphLogging`, the same text in vLLM 0.24 and 0.32;
each line carries vLLM's log prefix, and the entrypoint's `+12.3s [vllm] ` before it):

    **CUDAGraph Config Settings:**

    - Mode: FULL_DECODE_ONLY
    - Capture sizes: [4, 8, 12, 16]

    **CUDAGraph Stats:**

    | Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |
    |-----------------|---------------|--------------|--------------|-------|
    | 8               | 8             | 0            | FULL         | 120   |

A row is one (tokens in the step, tokens after padding to a graph size, the mode the
step ran in: FULL, PIECEWISE or NONE) and how many steps had it.  vLLM has no
Prometheus metric for this (0.24, 0.32).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

SETTINGS_MARK = "**CUDAGraph Config Settings:**"
STATS_MARK = "**CUDAGraph Stats:**"
_MODE_RE = re.compile(r"- Mode: ([A-Z_]+)\s*$")
_SIZES_RE = re.compile(r"- Capture sizes: \[([\d,\s]*)\]\s*$")
_ROW_RE = re.compile(r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*-?\d+\s*\|\s*([A-Z_]+)\s*\|\s*(\d+)\s*\|\s*$")
_HEADER_RE = re.compile(r"\|\s*Unpadded Tokens\s*\||\|-+\|")


@dataclass(frozen=True)
class Dispatch:
    """Steps of one token count that ran padded to `padded_tokens` in `runtime_mode`."""

    unpadded_tokens: int
    padded_tokens: int
    runtime_mode: str  # FULL, PIECEWISE or NONE
    steps: int


@dataclass(frozen=True)
class GraphStats:
    """Every table vLLM printed, summed: the configured mode and sizes, and the steps."""

    mode: str | None
    capture_sizes: tuple[int, ...]
    tables: int
    dispatches: tuple[Dispatch, ...]  # one per (unpadded, padded, mode), by unpadded tokens

    def at_width(self, tokens: int) -> list[Dispatch]:
        return [d for d in self.dispatches if d.unpadded_tokens == tokens]


@dataclass
class _Table:
    mode: str | None = None
    sizes: tuple[int, ...] = ()
    rows: list[tuple[int, int, str, int]] | None = None  # None until the stats mark


def _tables(lines: Iterable[str]) -> list[_Table]:
    """The tables in order; a table ends at the first line after its rows that is not one."""
    tables: list[_Table] = []
    current: _Table | None = None
    for line in lines:
        text = line.rstrip("\r\n")
        if SETTINGS_MARK in text:
            current = _Table()
            tables.append(current)
        elif current is None:
            continue
        elif current.rows is None:
            current = _settings_line(current, text)
        elif row := _ROW_RE.search(text):
            current.rows.append((int(row[1]), int(row[2]), row[3], int(row[4])))
        elif current.rows or not (_HEADER_RE.search(text) or text.rstrip().endswith("]")):
            current = None  # past the rows (or not a table after all)
    return [t for t in tables if t.rows is not None]


def _settings_line(table: _Table, text: str) -> _Table:
    if mode := _MODE_RE.search(text):
        table.mode = mode[1]
    elif sizes := _SIZES_RE.search(text):
        table.sizes = tuple(int(s) for s in sizes[1].replace(" ", "").split(",") if s)
    elif STATS_MARK in text:
        table.rows = []
    return table


def parse_graph_stats(text: str) -> GraphStats | None:
    """The CUDA-graph stats in a vLLM (or entrypoint) log; None when it printed none."""
    tables = _tables(text.splitlines())
    if not tables:
        return None
    steps: Counter[tuple[int, int, str]] = Counter()
    for table in tables:
        for unpadded, padded, mode, count in table.rows or ():
            steps[(unpadded, padded, mode)] += count
    last = tables[-1]
    return GraphStats(
        mode=last.mode,
        capture_sizes=last.sizes,
        tables=len(tables),
        dispatches=tuple(Dispatch(u, p, m, n) for (u, p, m), n in sorted(steps.items())),
    )
