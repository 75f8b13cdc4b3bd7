"""What to change when a plan does not fit — computed by re-planning, not canned —
and warnings about settings that start but hurt."""

from __future__ import annotations

import math
from dataclasses import replace

from budget import known_breakage
from budget.errors import BudgetError
from budget.graphs import decode_dispatch
from budget.plan import CUDA_CONTEXT_BYTES, Plan, min_kv_bytes, plan_for, start_free_bytes
from budget.profiles import GiB, ModelProfile, hardware_names, load_hardware
from budget.settings import Settings

MIN_CONTEXT = 256


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def _replan(profile: ModelProfile, s: Settings) -> Plan:
    return plan_for(profile, s)


def shortfall(plan: Plan) -> str:
    """Which component is largest and by how much the plan is over."""
    need_kv = min_kv_bytes(plan)
    fixed = plan.total_bytes - plan.kv_cache_bytes
    over = fixed + max(need_kv, plan.kv_cache_bytes) - plan.usable_bytes
    if plan.kv_mode != "fixed":
        over = fixed + need_kv - plan.usable_bytes
    biggest = max((k for k in plan.components if k != "kv_cache"), key=lambda k: plan.components[k])
    usable = ""
    if start_free_bytes(plan.settings) is not None and plan.fixed_start_utilization is not None:
        usable = (
            f"; usable is the GPU less vLLM's CUDA context ({_gib(CUDA_CONTEXT_BYTES)}), "
            "which vLLM's start-up check must find free"
        )
    return (
        f"does not fit: short by {_gib(max(over, 0))} "
        f"(one {plan.settings.max_model_len:,}-token request needs a {_gib(need_kv)} KV pool; "
        f"largest component {biggest} = {_gib(plan.components[biggest])}{usable})"
    )


def largest_context(profile: ModelProfile, s: Settings) -> int | None:
    lo, hi = MIN_CONTEXT, s.max_model_len - 1
    if hi < lo or not _replan(profile, replace(s, max_model_len=lo)).fits:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _replan(profile, replace(s, max_model_len=mid)).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _candidates(s: Settings) -> list[tuple[str, Settings]]:
    out: list[tuple[str, Settings]] = []
    if s.kv_cache_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        out.append(("--kv-cache-dtype fp8", replace(s, kv_cache_dtype="fp8")))
    if s.max_num_seqs > 1:
        out.append(
            (
                "--max-num-seqs 1",
                replace(
                    s,
                    max_num_seqs=1,
                    capture_sizes=tuple(c for c in s.capture_sizes if c <= s.mtp + 1)
                    or s.capture_sizes[:1],
                ),
            )
        )
    for chunk in (1024, 512):
        if s.max_num_batched_tokens > chunk:
            out.append(
                (f"--max-num-batched-tokens {chunk}", replace(s, max_num_batched_tokens=chunk))
            )
            break
    if s.mtp:
        out.append(
            (
                "--mtp 0 (no MTP)" if s.draft_method == "mtp" else "no --speculative-config",
                replace(
                    s,
                    mtp=0,
                    speculation=None,
                    draft=None,
                    draft_vocab_rows=0,
                    capture_sizes=tuple(
                        c // (s.mtp + 1) for c in s.capture_sizes if c % (s.mtp + 1) == 0
                    ),
                ),
            )
        )
    for fmt in ("fp8", "nvfp4", "int4"):
        if any(
            v not in (fmt, "nvfp4", "int4")
            for k, v in s.formats.items()
            if k not in ("router", "norms")
        ):
            out.append(
                (
                    f"--weights-dtype {fmt}",
                    replace(
                        s,
                        formats={
                            k: v if k in ("router", "norms") else fmt for k, v in s.formats.items()
                        },
                    ),
                )
            )
    if s.kv_cache_memory_bytes is not None:
        out.append(
            (
                "drop --kv-cache-memory-bytes (let the planner size the pool)",
                replace(s, kv_cache_memory_bytes=None),
            )
        )
    return out


def _scale_out(profile: ModelProfile, s: Settings) -> list[str]:
    """More GPUs (TP in one box, or more nodes for UMA / multi-node setups), and the
    hardware profiles on which the plan fits as configured."""
    if s.device != "cuda":
        return []
    more = _more_gpus(profile, s)
    tips = [more] if more else []
    fitting = [
        name
        for name in _hardware_profiles()
        if name != s.hardware.name and _fits(profile, _on_hardware(s, name))
    ]
    if fitting:
        others = f" (also: {', '.join(fitting[1:])})" if len(fitting) > 1 else ""
        tips.append(f"--hardware {fitting[0]}: fits as configured{others}")
    return tips


def _on_hardware(s: Settings, name: str) -> Settings:
    hw = load_hardware(name)
    ranks = s.tp * s.pp
    nodes = max(1, ranks // hw.gpus) if s.nodes > 1 or hw.nodes > 1 else 1
    return replace(s, hardware=hw, nodes=nodes, tp=ranks // s.pp if nodes > 1 else s.tp)


def _fits(profile: ModelProfile, s: Settings) -> bool:
    """Whether the plan fits; False where vLLM cannot split the model so (budget/kv_tp.py)."""
    try:
        return _replan(profile, s).fits
    except BudgetError:
        return False


def _more_gpus(profile: ModelProfile, s: Settings) -> str | None:
    if s.nodes > 1 or s.hardware.uma:
        for nodes in (2, 4, 8):
            ranks = nodes * s.hardware.gpus
            if nodes > s.nodes and _fits(profile, replace(s, nodes=nodes, tp=ranks, pp=1)):
                return f"--nodes {nodes}: fits on {nodes} × {s.hardware.name} (TP {ranks}, Ray)"
        return None
    for tp in (2, 4, 8):
        if tp > s.tp and _fits(profile, replace(s, tp=tp)):
            return f"--tp {tp}: fits on {tp} × {s.hardware.name} (per-rank memory)"
    return None


def _hardware_profiles() -> list[str]:
    return [n for n in hardware_names() if n not in ("cpu", "custom")]


def suggestions_for(profile: ModelProfile, s: Settings, plan: Plan) -> list[str]:
    tips = [shortfall(plan)]
    ctx = largest_context(profile, s)
    if ctx is not None:
        tips.append(f"--max-model-len {ctx}: the largest context that fits as configured")
    for flag, changed in _candidates(s):
        alt = _replan(profile, changed)
        verdict = "fits" if alt.fits else "still does not fit"
        tips.append(
            f"{flag}: {verdict} (headroom {_gib(alt.headroom_bytes)}, "
            f"KV {alt.kv_cache_tokens:,} tokens)"
        )
    return tips + _scale_out(profile, s)


def warnings_for(plan: Plan) -> list[str]:
    s = plan.settings
    out: list[str] = [s.vllm.warning] if s.vllm.warning else []
    if s.device == "cuda" and s.cudagraph_mode.startswith("FULL") and s.mtp:
        widths = decode_dispatch(s.cudagraph_mode, s.capture_sizes, s.mtp, s.max_num_seqs)
        if missing := [f"{d.width} ({d.mode})" for d in widths if d.mode != "FULL"]:
            out.append(
                f"decode widths {', '.join(missing)} have no full graph: they are larger "
                "than every captured size a full decode graph has"
            )
        padded = [d for d in widths if d.mode == "FULL" and d.padded_to != d.width]
        if padded:
            out.append(
                f"decode widths {', '.join(f'{d.width}→{d.padded_to}' for d in padded)} replay "
                "the next captured graph, padded: "
                "each such step computes the padding tokens too (capture (K+1)×S exactly)"
            )
    out.extend(known_breakage.warnings(plan.model, s.vllm.version, s.hardware.sm))
    if plan.layout.padding_layers:
        out.append(
            f"{plan.layout.padding_layers} padding layer(s) in the KV groups waste "
            "part of the pool (vLLM pads groups to equal size)"
        )
    if s.hardware.uma and plan.kv_mode == "utilization":
        out.append(
            "on unified memory prefer --kv-cache-memory-bytes: vLLM reads free memory "
            "from MemAvailable and the fraction does not bound the profiling peak"
        )
    available, start = plan.mem_available_at_start_bytes, plan.fixed_start_utilization
    if available is not None and start is not None:
        if math.ceil(s.hardware.memory_bytes * start) > available:
            out.append(
                f"--gpu-memory-utilization {start:.3f} covers the fixed pool's plan but asks "
                f"more than the {_gib(available)} MemAvailable predicted at start: vLLM's "
                "start-up check may refuse it (a smaller --kv-cache-memory-bytes leaves room)"
            )
    if s.hardware.node_link_given and s.nodes == 1:
        out.append(
            "--node-link-gbs/--node-link-latency-us describe the link between nodes; this "
            "plan has one node, so its speed estimate does not use them (give --nodes)"
        )
    if plan.model.assumed:
        out.append(f"profile values assumed (not published): {', '.join(plan.model.assumed)}")
    if plan.fits and 0 < plan.max_concurrency < s.max_num_seqs:
        out.append(
            f"KV pool holds {plan.max_concurrency:.2f} full-length requests, fewer than "
            f"max_num_seqs={s.max_num_seqs}: long requests will queue or be preempted"
        )
    return out
