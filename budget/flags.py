"""The exact `vllm serve` arguments and the compose `.env` lines of a plan."""

from __future__ import annotations

import json

from budget.plan import Plan


def vllm_args(plan: Plan) -> list[str]:
    s = plan.settings
    args: list[str] = []
    if plan.model_dir:
        args += ["--model", plan.model_dir]
    if s.served_model_name:
        args += ["--served-model-name", s.served_model_name]
    if s.runner != "generate":
        args += ["--runner", s.runner]
    if plan.model.language_model_only:
        args.append("--language-model-only")
    if s.tp > 1:
        args += ["--tensor-parallel-size", str(s.tp)]
    if s.pp > 1:
        args += ["--pipeline-parallel-size", str(s.pp)]
    if s.nodes > 1:
        args += ["--distributed-executor-backend", "ray"]
    args += [
        "--max-model-len",
        str(s.max_model_len),
        "--max-num-seqs",
        str(s.max_num_seqs),
        "--max-num-batched-tokens",
        str(s.max_num_batched_tokens),
        *_prefill_args(s.runner, s.prefix_caching),
    ]
    if s.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", s.kv_cache_dtype]
    if s.block_size is not None:
        args += ["--block-size", str(s.block_size)]
    if not s.hybrid_kv_cache_manager:
        args.append("--disable-hybrid-kv-cache-manager")
    args += _memory_args(plan)
    if s.speculation is not None:
        args += ["--speculative-config", s.speculation.to_json()]
    if s.gdn_prefill_backend and plan.model.gdn is not None and s.device == "cuda":
        args += ["--gdn-prefill-backend", s.gdn_prefill_backend]
    if s.device == "cuda":
        compilation = {
            "cudagraph_mode": s.cudagraph_mode,
            "cudagraph_capture_sizes": list(s.capture_sizes),
        }
        if s.cudagraph_mode == "NONE":
            compilation = {"cudagraph_mode": "NONE"}
        args += ["--compilation-config", json.dumps(compilation, separators=(",", ":"))]
    args.append("--enable-prompt-tokens-details")
    return args


def _prefill_args(runner: str, prefix_caching: bool) -> list[str]:
    """Chunked prefill and prefix caching on for a generate model.  The pooling runner
    gets neither `--enable-…` flag: vLLM turns both on by itself where its pooler allows
    them (a causal decoder with last-token pooling, as Qwen3-Embedding) and off for mean
    or CLS pooling, where forcing them on only earns a "may crash or produce incorrect
    outputs" warning (config/model.py `is_chunked_prefill_supported` /
    `is_prefix_caching_supported`, engine/arg_utils.py, vLLM 0.32.0)."""
    if runner != "pooling":
        on = "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"
        return ["--enable-chunked-prefill", on]
    return [] if prefix_caching else ["--no-enable-prefix-caching"]


def _memory_args(plan: Plan) -> list[str]:
    if plan.kv_mode == "utilization":
        return ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}"]
    args = ["--kv-cache-memory-bytes", str(plan.kv_cache_bytes)]
    # vLLM still refuses to start unless free (MemAvailable on UMA) ≥ ceil(total × util)
    # (v1/worker/utils.py request_memory), even with the pool fixed: the user's fraction
    # as given, else the one the plan chose (UMA) or the one that covers a fixed pool.
    start = plan.start_utilization
    if start is not None and start == plan.settings.gpu_memory_utilization:
        args += ["--gpu-memory-utilization", f"{start:g}"]
    elif start is not None:
        args += ["--gpu-memory-utilization", f"{start:.3f}"]
    return args


def env_lines(plan: Plan) -> list[str]:
    """`SPARKSERVE_*` inputs for compose's .env (the entrypoint recomputes the plan)."""
    s = plan.settings
    values: dict[str, object] = {
        "MODEL": plan.model_dir or plan.model_name,
        "HARDWARE": s.hardware.name,
        "DEVICE": s.device,
        "TP": s.tp,
        "MAX_MODEL_LEN": s.max_model_len,
        "MAX_NUM_SEQS": s.max_num_seqs,
        "MAX_NUM_BATCHED_TOKENS": s.max_num_batched_tokens,
        "MTP": s.mtp if s.draft_method == "mtp" else 0,
        "KV_CACHE_DTYPE": s.kv_cache_dtype,
        "CUDAGRAPH_MODE": s.cudagraph_mode,
        "PREFIX_CACHING": "on" if s.prefix_caching else "off",
    }
    if not s.hybrid_kv_cache_manager:
        values["HYBRID_KV_CACHE_MANAGER"] = "off"
    if s.nodes > 1:  # scale-out inputs; absent on one node
        values.update(PP=s.pp, NODES=s.nodes)
    if plan.kv_mode != "utilization":
        values["KV_CACHE_MEMORY_BYTES"] = plan.kv_cache_bytes
    if s.served_model_name:
        values["SERVED_MODEL_NAME"] = s.served_model_name
    if s.runner != "generate":  # absent for a chat model, as before
        values["RUNNER"] = s.runner
    if s.gdn_prefill_backend:
        values["GDN_PREFILL_BACKEND"] = s.gdn_prefill_backend
    if s.speculation is not None and s.draft_method != "mtp":
        values.pop("MTP")
        values["SPECULATIVE_CONFIG"] = s.speculation.to_json()
    return [f"SPARKSERVE_{key}={value}" for key, value in values.items()]
