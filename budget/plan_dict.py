"""The JSON contract of a plan (docs/budget.md): the required keys first, then details."""

from __future__ import annotations

from typing import Any

from budget.flags import vllm_args
from budget.plan import Plan


def plan_dict(plan: Plan) -> dict[str, Any]:
    s = plan.settings
    return {
        "model": plan.model_name,
        "model_dir": plan.model_dir,
        "hardware": s.hardware.name,
        "device": s.device,
        "uma": s.hardware.uma,
        "cpu_avx512_bf16": s.device == "cpu" and s.hardware.cpu_avx512_bf16,
        "fits": plan.fits,
        "kv_cache_tokens": plan.kv_cache_tokens,
        "max_concurrency": plan.max_concurrency,
        "block_size": plan.block_size,
        "kv_cache_bytes": plan.kv_cache_bytes,
        "total_bytes": plan.total_bytes,
        "usable_bytes": plan.usable_bytes,
        "headroom_bytes": plan.headroom_bytes,
        "components": dict(plan.components),
        "estimates": dict(plan.notes),
        "suggestions": list(plan.suggestions),
        "vllm_args": vllm_args(plan),
        "warnings": list(plan.warnings),
        "vllm_version": s.vllm.version,
        "vllm_rules": s.vllm.rules.to_dict(),
        "kv_mode": plan.kv_mode,
        "settings": _settings(plan),
        "kv_layout": _layout(plan),
        "speed_estimate": plan.speed.to_dict(),
        "mem_available_at_start_bytes": plan.mem_available_at_start_bytes,
        "ple_traffic": plan.ple_traffic,
        "parallelism": {"tp": s.tp, "pp": s.pp, "nodes": s.nodes, "why": list(plan.parallelism)},
        "assumed": list(plan.model.assumed),
        "weights_source": dict(plan.weights_source),
        "speculative_config": s.speculation.vllm_config if s.speculation else None,
        "context_limit": {
            "max_model_len": plan.model.context_limit.max_model_len,
            "key": plan.model.context_limit.key,
        },
    }


def _settings(plan: Plan) -> dict[str, Any]:
    s = plan.settings
    util = plan.gpu_memory_utilization or plan.start_utilization
    return {
        "tp": s.tp,
        "pp": s.pp,
        "nodes": s.nodes,
        "max_model_len": s.max_model_len,
        "max_num_seqs": s.max_num_seqs,
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "kv_cache_dtype": s.kv_cache_dtype,
        "mtp": s.mtp,
        "prefix_caching": s.prefix_caching,
        "cudagraph_mode": s.cudagraph_mode,
        "cudagraph_capture_sizes": list(s.capture_sizes),
        "gpu_memory_utilization": util,
        "draft_vocab_rows": s.draft_vocab_rows,
        "weight_formats": dict(s.formats),
        "gdn_prefill_backend": s.gdn_prefill_backend,
        "hybrid_kv_cache_manager": s.hybrid_kv_cache_manager,
    }


def _layout(plan: Plan) -> dict[str, Any]:
    layout = plan.layout
    return {
        "page_bytes": layout.page_bytes,
        "num_groups": layout.num_groups,
        "group_size": layout.group_size,
        "padding_layers": layout.padding_layers,
        "blocks_per_request": layout.blocks_per_request,
        "num_blocks": plan.capacity.num_blocks,
        "num_sliding_groups": layout.num_sliding_groups,
        "sliding_tokens": layout.sliding_tokens,
        "sliding_block_size": layout.sliding_block_size or layout.block_size,
        "num_mamba_groups": layout.num_mamba_groups,
        "mamba_page_bytes": layout.mamba_page_bytes,
        "mamba_cache_mode": layout.mamba_cache_mode,
        "log_lines": list(layout.log_lines),
    }
