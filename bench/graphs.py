"""Step 2 of seed 000: does every uniform decode width (1+K)×S hit a captured graph?"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from budget.graphs import seeds_capture_sizes, uncovered_decode_widths

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
    """Which (1+K)×S widths replay a full graph and which fall back to eager."""
    widths = list(seeds_capture_sizes(mtp_k, max_num_seqs))
    full = graph_mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    if not full or not capture_sizes:
        reason = (
            f"graph mode {graph_mode or 'unknown'}: no full graphs"
            if not full
            else ("no capture sizes known")
        )
        return {"widths": widths, "covered": [], "fallback": widths, "note": reason}
    missing = uncovered_decode_widths(tuple(capture_sizes), mtp_k, max_num_seqs)
    return {
        "widths": widths,
        "covered": [w for w in widths if w not in missing],
        "fallback": missing,
        "note": "all widths captured" if not missing else "widths without an equal capture size",
    }


def describe(result: dict[str, Any]) -> str:
    return json.dumps({k: result[k] for k in ("covered", "fallback")}) + f" ({result['note']})"
