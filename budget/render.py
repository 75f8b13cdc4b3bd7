"""Human output of a plan: the table, with a bar per component."""

from __future__ import annotations

import shlex

from budget.flags import vllm_args
from budget.kv import format_kv_log_lines
from budget.plan import Plan
from budget.profiles import GiB

BAR_WIDTH = 30


def _bar(part: int, whole: int) -> str:
    filled = round(BAR_WIDTH * part / whole) if whole else 0
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def _header(plan: Plan) -> list[str]:
    s = plan.settings
    hw = s.hardware
    kind = "unified memory" if hw.uma else "discrete"
    mtp = f"{s.draft_method.upper()} {s.mtp}" if s.mtp else "MTP off"
    graphs = f"{s.cudagraph_mode} {list(s.capture_sizes)}" if s.device == "cuda" else "no graphs"
    return [
        f"model     {plan.model_name} ({plan.model.architecture})",
        f"hardware  {hw.name}: {hw.description} — {hw.memory_bytes / GiB:.1f} GiB, {kind}",
        f"serving   device {s.device}, TP {s.tp}, PP {s.pp}, nodes {s.nodes}, "
        f"context {s.max_model_len:,}, "
        f"max seqs {s.max_num_seqs}, chunk {s.max_num_batched_tokens:,}, KV dtype "
        f"{s.kv_cache_dtype}, {mtp}, prefix caching {'on' if s.prefix_caching else 'off'}, "
        f"{graphs}",
        "",
    ]


def _component_rows(plan: Plan) -> list[str]:
    whole = plan.usable_bytes
    rows = [f"{'component':<26}{'GiB':>9}  {'share of usable':<{BAR_WIDTH}}  how"]
    for name, size in sorted(plan.components.items(), key=lambda kv: -kv[1]):
        how = plan.notes.get(name, "")
        rows.append(f"{name:<26}{size / GiB:>9.2f}  {_bar(size, whole)}  {how}")
    rows.append(f"{'total':<26}{plan.total_bytes / GiB:>9.2f}")
    rows.append(f"{'usable':<26}{plan.usable_bytes / GiB:>9.2f}")
    rows.append(f"{'headroom':<26}{plan.headroom_bytes / GiB:>9.2f}")
    return rows


def _kv_rows(plan: Plan) -> list[str]:
    s = plan.settings
    lines = format_kv_log_lines(plan.capacity, s.max_model_len, s.device, s.vllm.rules)
    rows = [
        "",
        f"KV pool   {plan.kv_cache_bytes / GiB:.2f} GiB ({plan.kv_mode}), block "
        f"{plan.block_size} tokens, {plan.layout.num_groups} group(s) × "
        f"{plan.layout.group_size} layers, {plan.capacity.num_blocks:,} blocks",
        f"vLLM rules {s.vllm.rules.name} (planned for vLLM {s.vllm.version})",
        *(f"vLLM will log: {line}" for line in lines),
    ]
    rows += [f"vLLM will log: {extra}" for extra in plan.layout.log_lines]
    fraction = plan.start_utilization or plan.gpu_memory_utilization
    if plan.mem_available_at_start_bytes is not None and fraction is not None:
        rows.append(
            f"start     vLLM will see MemAvailable ≈ "
            f"{plan.mem_available_at_start_bytes / GiB:.2f} GiB; it requires "
            f"ceil(total × utilization), hence --gpu-memory-utilization "
            f"{fraction:g} (the page cache counts as available there: docs/dgx-spark.md)"
        )
    if plan.ple_traffic:
        t = plan.ple_traffic
        rows.append(
            f"PLE       {t['lookups_per_chunk']:,} row lookups per "
            f"{s.max_num_batched_tokens:,}-token chunk ≈ {t['bytes_per_chunk'] / 2**20:.0f} MiB "
            "from the memory-mapped table (NVMe when cold)"
        )
    sp = plan.speed
    rows.append(
        f"speed     ESTIMATE (roofline): decode ≈ {sp.decode_tokens_per_s:.1f} tok/s "
        f"per stream at {s.max_model_len // 2:,} tokens of context "
        f"({sp.expected_tokens_per_step:.2f} tokens/step), prefill ≈ "
        f"{sp.prefill_tokens_per_s:,.0f} tok/s"
    )
    if sp.link and sp.link.between != "none":
        link = sp.link
        rows.append(
            f"link      {sp.comm_seconds_per_step * 1e3:.2f} ms/step of that on the link "
            f"between {link.between}: {link.gbs:g} GB/s, {link.latency_us:g} µs "
            f"({link.source})"
        )
    return rows


def render_table(plan: Plan) -> str:
    verdict = (
        f"FITS — {plan.kv_cache_tokens:,} KV tokens, max concurrency "
        f"{plan.max_concurrency:.2f}× at {plan.settings.max_model_len:,} tokens"
        if plan.fits
        else "DOES NOT FIT"
    )
    lines = [*_header(plan), *_component_rows(plan), *_kv_rows(plan), "", verdict]
    lines += [f"  parallelism: {why}" for why in plan.parallelism]
    lines += [f"  → {tip}" for tip in plan.suggestions]
    lines += [f"warning: {w}" for w in plan.warnings]
    lines += ["", *command_lines(vllm_args(plan))]
    return "\n".join(lines)


def command_lines(args: list[str]) -> list[str]:
    """`vllm serve` with one flag (and its value) per line, shell-quoted."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    parts = ["    " + " ".join(shlex.quote(a) for a in group) for group in groups]
    return ["vllm serve \\", *[f"{p} \\" for p in parts[:-1]], parts[-1]]
