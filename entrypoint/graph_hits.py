"""Step 2 of the tuning article: does every uniform decode width (1+K)×S hit a captured graph?

`coverage` predicts it from the capture sizes and mode vLLM logged at start;
`graph_hits` sets that prediction beside what vLLM reported it ran
(entrypoint/graph_stats.py, `--cudagraph-metrics`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from budget.graphs import decode_dispatch, seeds_capture_sizes
from entrypoint.graph_stats import GraphStats

# vLLM logs its config at start: `… compilation_config={…"cudagraph_capture_sizes": [1, 2, …]…}`
_SIZES_RE = re.compile(r"""['"]cudagraph_capture_sizes['"]\s*:\s*\[([\d,\s]*)\]""")
_MODE_RE = re.compile(r"""['"]cudagraph_mode['"]\s*:\s*(?:<CUDAGraphMode\.)?['"]?([A-Z_]+)""")
_KV_RE = re.compile(r"KV cache size: ([\d,]+) tokens")


def parse_log(text: str) -> dict[str, Any]:
    """Capture sizes, graph mode and KV tokens as vLLM logged them (last occurrence)."""
    sizes = _SIZES_RE.findall(text)
    modes = _MODE_RE.findall(text)
    kv = _KV_RE.findall(text)
    return {
        "capture_sizes": [int(s) for s in sizes[-1].replace(" ", "").split(",") if s]
        if sizes
        else None,
        "graph_mode": modes[-1] if modes else None,
        "kv_cache_tokens": int(kv[-1].replace(",", "")) if kv else None,
    }


def coverage(
    mtp_k: int, max_num_seqs: int, graph_mode: str | None, capture_sizes: Sequence[int] | None
) -> dict[str, Any]:
    """Which (1+K)×S widths replay a full graph of their own size, which replay a larger
    one padded, and which run without a full graph (budget/graphs.py `decode_dispatch`)."""
    widths = list(seeds_capture_sizes(mtp_k, max_num_seqs))
    full = graph_mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    if not full or not capture_sizes or graph_mode is None:
        reason = (
            f"graph mode {graph_mode or 'unknown'}: no full graphs"
            if not full
            else ("no capture sizes known")
        )
        return {"widths": widths, "covered": [], "padded": {}, "fallback": widths, "note": reason}
    dispatch = decode_dispatch(graph_mode, tuple(capture_sizes), mtp_k, max_num_seqs)
    exact = [d.width for d in dispatch if d.mode == "FULL" and d.padded_to == d.width]
    padded = {d.width: d.padded_to for d in dispatch if d.mode == "FULL" and d.padded_to != d.width}
    fallback = [d.width for d in dispatch if d.mode != "FULL"]
    notes = []
    if padded:
        notes.append("widths padded up to a larger captured size")
    if fallback:
        notes.append("widths above every full decode graph")
    return {
        "widths": widths,
        "covered": exact,
        "padded": padded,
        "fallback": fallback,
        "note": "; ".join(notes) or "every width has a captured size of its own",
    }


def describe(result: dict[str, Any]) -> str:
    shown = {k: result[k] for k in ("covered", "padded", "fallback")}
    return json.dumps(shown) + f" ({result['note']})"


def _verdict(full_steps: int, other_steps: int) -> str:
    if full_steps and other_steps:
        return "FULL and fallback"
    if full_steps:
        return "FULL"
    return "fell back" if other_steps else "not seen"


def width_hits(width: int, predicted: str, stats: GraphStats) -> dict[str, Any]:
    """One width: the prediction, and the steps of that many tokens vLLM ran."""
    seen = stats.at_width(width)
    modes: Counter[str] = Counter()
    for dispatch in seen:
        modes[dispatch.runtime_mode] += dispatch.steps
    full = modes["FULL"]
    other = sum(modes.values()) - full
    return {
        "width": width,
        "predicted": predicted,
        "reported": _verdict(full, other),
        "full_steps": full,
        "fallback_steps": other,
        "padded_to": sorted({d.padded_tokens for d in seen if d.runtime_mode == "FULL"}),
        "modes": dict(sorted(modes.items())),
    }


def graph_hits(
    predicted: dict[str, Any], stats: GraphStats | None, why_none: str | None = None
) -> dict[str, Any]:
    """Each (1+K)×S width of `coverage`'s prediction beside what vLLM reported running.

    A step is counted by its token count only: vLLM's stats do not say whether a step of
    W tokens was a uniform decode or a mixed batch of the same size.
    """
    if stats is None:
        note = why_none or "vLLM printed no CUDA-graph stats"
        return {"reported": False, "note": note, "widths": []}
    rows = [width_hits(w, _predicted(predicted, w), stats) for w in predicted["widths"]]
    return {
        "reported": True,
        "note": f"{stats.tables} table(s) from vLLM, mode {stats.mode or 'unknown'}, "
        f"capture sizes {list(stats.capture_sizes)}",
        "widths": rows,
        "full": [r["width"] for r in rows if r["reported"] == "FULL"],
        "fell_back": [r["width"] for r in rows if r["fallback_steps"]],
        "not_seen": [r["width"] for r in rows if r["reported"] == "not seen"],
    }


def _predicted(coverage_result: dict[str, Any], width: int) -> str:
    if width in coverage_result["covered"]:
        return "FULL"
    if width in coverage_result["padded"]:
        return f"FULL, padded to {coverage_result['padded'][width]}"
    return "no full graph"
