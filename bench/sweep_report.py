"""The sweep's Markdown report and plots: one table per stage, in the tuning article's order."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.markdown import num, table, value

# (row key, column title, decimals; None = shown as is)
COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("output_tok_s", "output tok/s", 1),
    ("ttft_p50_ms", "TTFT p50 ms", 1),
    ("ttft_p95_ms", "TTFT p95 ms", 1),
    ("itl_p95_ms", "ITL p95 ms", 1),
    ("prefill_tok_s", "prefill tok/s", 1),
    ("long_ttft_ms", "long TTFT ms", 1),
    ("gap_p95_ms", "decode gap p95 ms", 1),
    ("gap_p99_ms", "decode gap p99 ms", 1),
    ("acceptance_rate", "spec accept rate", 3),
    ("mean_acceptance_length", "mean accept len", 2),
    ("preemptions", "preemptions", 0),
    ("plan_kv_tokens", "plan KV tokens", 0),
    ("vllm_kv_tokens", "vLLM KV tokens", 0),
    ("graph_mode", "graph mode", None),
    ("graph_fallback_widths", "(1+K)×S widths without a full graph", None),
    ("graph_padded_widths", "(1+K)×S widths padded to a larger graph", None),
    ("graph_full_widths", "widths vLLM ran FULL", None),
    ("graph_reported_fallback_widths", "widths with steps vLLM ran without FULL", None),
)


def stage_table(param: str, rows: Sequence[Mapping[str, Any]]) -> str:
    used = [c for c in COLUMNS if any(r.get(c[0]) not in (None, []) for r in rows)]
    body = [
        [str(r["value"]), *(value(r.get(k)) if d is None else num(r.get(k), d) for k, _, d in used)]
        for r in rows
    ]
    return table((param, *(title for _, title, _ in used)), body)


def graph_hits_section(param: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Step 2 per setting: each (1+K)×S width, predicted against what vLLM reported."""
    parts: list[str] = []
    for row in rows:
        hits = row.get("graph_hits")
        if hits is None:
            continue
        parts += ["", f"Step 2 at {param}={row['value']}: {hits['note']}"]
        if hits["widths"]:
            body = [
                [
                    str(w["width"]),
                    w["predicted"],
                    w["reported"],
                    ", ".join(f"{m} ×{n}" for m, n in w["modes"].items()) or "–",
                    value(w["padded_to"]),
                ]
                for w in hits["widths"]
            ]
            headers = ("width", "predicted", "vLLM reported", "steps by mode", "FULL padded to")
            parts += ["", table(headers, body)]
    return parts


def render_sweep(result: Mapping[str, Any], plots: Mapping[str, Sequence[str]]) -> str:
    parts = [
        "# Sweep (the tuning article tuning order)",
        "",
        f"Settings: `{json.dumps(result['identity'])}`",
    ]
    for stage in result["stages"]:
        parts += ["", f"## {stage['param']} — {stage['step']}", ""]
        parts.append(
            stage_table(stage["param"], stage["rows"]) if stage["rows"] else "No setting ran."
        )
        parts += graph_hits_section(stage["param"], stage["rows"])
        if stage["chosen"] is not None:
            parts += ["", f"Chosen for later stages: **{stage['param']}={stage['chosen']}**"]
        for key, error in stage["failed"].items():
            first = (error or "").splitlines()[0] if error else "failed"
            parts += ["", f"- `{key}` failed: {first}"]
        parts += [f"\n![{p}](plots/{p})" for p in plots.get(stage["param"], ())]
    return "\n".join(parts) + "\n"


def write_sweep_report(result: Mapping[str, Any], out: Path, plots: bool = True) -> Path:
    pngs: dict[str, list[str]] = {}
    if plots:
        from bench.plots import plot_sweep  # matplotlib is optional: only when writing plots

        pngs = {
            s["param"]: plot_sweep(s["rows"], s["param"], out / "plots") for s in result["stages"]
        }
    (out / "sweep.json").write_text(
        json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8"
    )
    path = out / "sweep.md"
    path.write_text(render_sweep(result, pngs), encoding="utf-8")
    return path
