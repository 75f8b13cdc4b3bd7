"""PNG plots of a run and of a sweep (matplotlib's Figure API: no pyplot global state).

matplotlib is optional (`pip install 'sparkserve[chart]'`): this module is imported only
when plots are written, and says so in one line where matplotlib is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.records import RequestRecord

try:
    from matplotlib.figure import Figure
except ImportError:
    raise BenchError("the bench's plots need matplotlib: pip install 'sparkserve[chart]'") from None

DPI = 110
PCTS = ("p50", "p95", "p99")


def _save(fig: Figure, out_dir: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=DPI)
    return name


def latency_by_concurrency(summary: Mapping[str, Any], out_dir: Path) -> str | None:
    levels = summary["workloads"].get("short-chat", {}).get("summary", {}).get("levels")
    if not levels:
        return None
    names = list(levels)
    fig = Figure(figsize=(9, 3.6))
    ttft, tput = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for pct in PCTS:
        ttft.plot(
            names,
            [1000 * (levels[n]["ttft_s"] or {}).get(pct, 0) for n in names],
            marker="o",
            label=f"TTFT {pct}",
        )
        ttft.plot(
            names,
            [1000 * (levels[n]["itl_s"] or {}).get(pct, 0) for n in names],
            marker="x",
            linestyle="--",
            label=f"ITL {pct}",
        )
    ttft.set(title="Short chat latency", xlabel="concurrency", ylabel="ms")
    ttft.legend(fontsize=7)
    tput.bar(names, [levels[n]["output_tok_s"] or 0 for n in names])
    tput.set(title="Aggregate output tokens/s", xlabel="concurrency", ylabel="tok/s")
    return _save(fig, out_dir, "short_chat_latency_throughput.png")


def decode_gap_timeline(records: Sequence[RequestRecord], out_dir: Path) -> str | None:
    prefill = next((r for r in records if r.workload == "mixed" and r.group == "prefill"), None)
    decodes = [r for r in records if r.workload == "mixed" and r.group == "decode"]
    if prefill is None or prefill.first_token_s is None or not decodes:
        return None
    fig = Figure(figsize=(9, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    origin = min(r.start_s for r in decodes)
    for r in decodes:
        times = r.chunk_times_s
        ax.plot(
            [t - origin for t in times[1:]],
            [1000 * g for g in r.chunk_gaps_s],
            marker=".",
            linewidth=0.8,
            label=f"decode {r.index}",
        )
    ax.axvspan(
        prefill.start_s - origin,
        prefill.first_token_s - origin,
        alpha=0.2,
        color="tab:red",
        label=f"long prompt prefill ({prefill.prompt_tokens:,} tok)",
    )
    ax.set(
        title="Decode inter-chunk gaps while a long prompt is prefilled",
        xlabel="seconds",
        ylabel="gap ms",
    )
    ax.legend(fontsize=7)
    return _save(fig, out_dir, "mixed_decode_gap_timeline.png")


def cache_reuse_per_turn(summary: Mapping[str, Any], out_dir: Path) -> str | None:
    targets = summary["workloads"].get("agent-loop", {}).get("summary", {}).get("targets")
    if not targets:
        return None
    fig = Figure(figsize=(4.5 * len(targets), 3.6))
    for i, (name, t) in enumerate(targets.items(), start=1):
        ax = fig.add_subplot(1, len(targets), i)
        turns = [r["turn"] for r in t["turns"]]
        cached = [r["cached_tokens"] or 0 for r in t["turns"]]
        recomputed = [r["recomputed_tokens"] for r in t["turns"]]
        ax.bar(turns, cached, label="cached")
        ax.bar(turns, recomputed, bottom=cached, label="recomputed")
        ax.set(title=f"Agent loop prompt tokens — {name}", xlabel="turn", ylabel="tokens")
        ax.legend(fontsize=7)
    return _save(fig, out_dir, "agent_loop_cache_per_turn.png")


def plot_run(
    summary: Mapping[str, Any], records: Sequence[RequestRecord], out_dir: Path
) -> list[str]:
    """Write every plot the run has data for; return their file names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [
        latency_by_concurrency(summary, out_dir),
        decode_gap_timeline(records, out_dir),
        cache_reuse_per_turn(summary, out_dir),
    ]
    return [name for name in made if name is not None]


def plot_sweep(rows: Sequence[Mapping[str, Any]], param: str, out_dir: Path) -> list[str]:
    """Latency percentiles and tokens/s per setting of one swept parameter."""
    if not rows:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [str(r["value"]) for r in rows]
    fig = Figure(figsize=(9, 3.6))
    lat, tput = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for key, style in (
        ("ttft_p50_ms", "o-"),
        ("ttft_p95_ms", "o--"),
        ("gap_p95_ms", "s-"),
        ("gap_p99_ms", "s--"),
        ("itl_p95_ms", "x-"),
    ):
        values = [r.get(key) for r in rows]
        if any(v is not None for v in values):
            lat.plot(
                labels, [v if v is not None else float("nan") for v in values], style, label=key
            )
    lat.set(title=f"Latency per {param}", xlabel=param, ylabel="ms")
    lat.legend(fontsize=7)
    tput.bar(labels, [r.get("output_tok_s") or 0 for r in rows], label="output tok/s")
    tput.set(title=f"Tokens/s per {param}", xlabel=param, ylabel="tok/s")
    name = f"sweep_{param}.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=DPI)
    return [name]
