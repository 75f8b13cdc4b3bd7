"""Render a run's summary as Markdown (pure: summary dict + plot names in, text out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.conditions import KEYS
from bench.markdown import DASH, dist_ms, ms, num, pct, table, value

COUNTER_HEADERS = (
    "workload",
    "prompt tokens",
    "generated",
    "cached (vLLM)",
    "prefix hit rate",
    "preemptions",
    "spec accept rate",
    "mean accept len",
)


def conditions_section(conds: Mapping[str, Any]) -> str:
    sources = conds.get("sources", {})
    rows = [[key, value(conds.get(key)), sources.get(key, DASH)] for key in KEYS]
    return "## Conditions\n\n" + table(("condition", "value", "source"), rows)


def counters_section(workloads: Mapping[str, Any]) -> str:
    rows, checks = [], []
    for name, section in workloads.items():
        c = section.get("counters")
        if c is None:
            continue
        rows.append(
            [
                name,
                num(c["prompt_tokens"], 0),
                num(c["generation_tokens"], 0),
                num(c["cached_prompt_tokens"], 0),
                pct(c["prefix_cache_hit_rate"]),
                num(c["preemptions"], 0),
                pct(c["spec_decode_acceptance_rate"]),
                num(c["spec_decode_mean_acceptance_length"], 2),
            ]
        )
        for key, check in section.get("checks", {}).items():
            mark = "✓" if check["match"] else "✗"
            checks.append([name, key, num(check["client"]), num(check["vllm"], 0), mark])
    if not rows:
        return "## vLLM counters\n\nNo vLLM /metrics were readable; counter deltas are missing."
    return (
        "## vLLM counters over each workload\n\n"
        + table(COUNTER_HEADERS, rows)
        + "\n\nClient-side usage totals against vLLM's counter deltas:\n\n"
        + table(("workload", "tokens", "client (usage)", "vLLM counter", "equal"), checks)
    )


def short_chat_section(summary: Mapping[str, Any]) -> str:
    rows = [
        [
            group,
            num(s["requests"]),
            num(s["errors"]),
            num(s["output_tok_s"]),
            *dist_ms(s["ttft_s"]),
            *dist_ms(s["itl_s"]),
        ]
        for group, s in summary["levels"].items()
    ]
    headers = (
        "concurrency",
        "requests",
        "errors",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "TTFT p99 ms",
        "ITL p50 ms",
        "ITL p95 ms",
        "ITL p99 ms",
    )
    return "## Short chat\n\n" + table(headers, rows)


def agent_loop_section(summary: Mapping[str, Any]) -> str:
    targets = summary["targets"]
    side = [
        [
            name,
            pct(t["hit_rate_after_first"]),
            num(t["cached_tokens_after_first"]),
            num(t["prompt_tokens_after_first"]),
            ms(t["mean_ttft_after_first_s"]),
        ]
        for name, t in targets.items()
    ]
    parts = [
        "## Agent loop (the prefix-cache article layout)\n",
        table(
            ("target", "hit rate after turn 0", "cached tokens", "prompt tokens", "mean TTFT ms"),
            side,
        ),
    ]
    for name, t in targets.items():
        rows = [
            [
                num(r["turn"]),
                num(r["prompt_tokens"]),
                num(r["cached_tokens"]),
                num(r["recomputed_tokens"]),
                pct(r["hit_rate"]),
                ms(r["ttft_s"]),
            ]
            for r in t["turns"]
        ]
        parts.append(
            f"\n### {name}\n\n"
            + table(("turn", "prompt tokens", "cached", "recomputed", "hit rate", "TTFT ms"), rows)
        )
    return "\n".join(parts)


def mixed_section(summary: Mapping[str, Any]) -> str:
    if "error" in summary:
        return f"## Mixed traffic\n\n{summary['error']}"
    during, before = summary["gap_during_prefill_s"], summary["gap_before_prefill_s"]
    rows = [
        ["decode gap before the long prompt", *dist_ms(before)],
        ["decode gap during its prefill", *dist_ms(during)],
    ]
    facts = table(
        ("", "value"),
        [
            ["decode streams", num(summary["decode_streams"])],
            ["long prompt tokens", num(summary["prompt_tokens"])],
            ["its TTFT ms", ms(summary["ttft_s"])],
            ["its prefill tok/s (with decodes)", num(summary["prefill_tok_s"])],
            ["prefill tok/s alone (probe)", num(summary["solo_prefill_tok_s"])],
            ["streams outlasted the prefill", num(summary["streams_outlasted_prefill"])],
        ],
    )
    return (
        "## Mixed traffic (the tuning article §5.3)\n\n"
        + table(("decode inter-chunk gap", "p50 ms", "p95 ms", "p99 ms"), rows)
        + "\n\n"
        + facts
    )


def long_context_section(summary: Mapping[str, Any]) -> str:
    rows = [
        [
            num(r["index"]),
            num(r["prompt_tokens"]),
            num(r["cached_tokens"]),
            ms(r["ttft_s"]),
            num(r["prefill_tok_s"]),
        ]
        for r in summary["requests"]
    ]
    return "## Long context\n\n" + table(
        ("request", "prompt tokens", "cached", "TTFT ms", "prefill tok/s"), rows
    )


SECTIONS = {
    "short-chat": short_chat_section,
    "agent-loop": agent_loop_section,
    "mixed": mixed_section,
    "long-context": long_context_section,
}


def header(summary: Mapping[str, Any]) -> str:
    o = summary["options"]
    label = f" — {summary['label']}" if summary.get("label") else ""
    lines = [
        f"# Benchmark run{label}",
        "",
        f"- started {summary.get('started_at', DASH)}; model `{o['model']}` at {o['url']}"
        + (f", gateway {o['gateway_url']}" if o.get("gateway_url") else ""),
        f"- workloads {', '.join(o['workloads'])}; scale `{o['scale']}`; seed {o['seed']}",
    ]
    return "\n".join(lines)


def render_run(summary: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    parts = [
        header(summary),
        conditions_section(summary["conditions"]),
        counters_section(summary["workloads"]),
    ]
    for name, section in summary["workloads"].items():
        errors = f"\n\n{section['errors']} request(s) failed." if section["errors"] else ""
        parts.append(SECTIONS[name](section["summary"]) + errors)
    if plots:
        parts.append("## Plots\n\n" + "\n\n".join(f"![{p}](plots/{p})" for p in plots))
    return "\n\n".join(parts) + "\n"
