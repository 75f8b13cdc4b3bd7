"""Every byte besides the KV pool that competes for device memory, with how each
estimated one was estimated (one line each, shown in the table)."""

from __future__ import annotations

from dataclasses import dataclass

from budget.graphs import graph_pool_bytes
from budget.model import ModelSpec
from budget.profiles import GiB, ModelProfile
from budget.settings import Settings
from budget.speculative import MODEL_FREE_METHODS
from budget.units import MiB
from budget.weight_sources import WeightSizes, weight_sizes
from budget.weights import FORMAT_BYTES_PER_PARAM

# Estimates calibrated on an H200 with vLLM 0.24 (docs/gpu-calibration.md; the
# logs are replayed by tests/budget/test_gpu_calibration.py):
# requested − weights − KV − activation − graph estimate came to 1.16–1.52 GiB
# over five server starts (dense, MoE, Qwen3-Next-shaped): CUDA context,
# cuBLAS/NCCL workspaces and the fixed part of the profiling run's peak.
CUDA_RUNTIME_BYTES = 1331 * MiB  # 1.3 GiB
NCCL_BYTES = 256 * MiB  # NCCL buffers per rank with TP > 1 (not calibrated)
# MTP on the hybrid added 0.22 GiB beyond the graph estimate (drafter activations).
MTP_ACTIVATION_BYTES = 205 * MiB
# Ray on each node of a multi-node plan: raylet + GCS processes and the object
# store's floor; on UMA it competes for the same memory (assumed, not calibrated).
RAY_NODE_BYTES = 1024 * MiB
GDN_CHUNK = 64  # chunked GDN prefill keeps one fp32 state per 64-token chunk
FP32 = 4
# Per prefill token: the dense model's chunk slope measured 17 KB/token (2048 →
# 8192 took 0.10 GiB off the KV pool for Llama-8B), i.e. ≈ 2 hidden-size buffers.
HIDDEN_BUFFERS = 2
SAMPLER_COPIES = 3  # logits, probabilities and a sort buffer in the sampler's profile run
# A dense model's profiling run has a torch peak that does not grow with the chunk: one
# vocab × hidden matrix in the model's dtype, within 2 % for Llama-3.1-8B (0.98 GiB) and
# Gemma 3 27B (2.63 GiB) on an H100 with vLLM 0.24 and an empty compile cache
# (tests/budget/fixtures/gpu_h100_families/profiling, docs/kv-arithmetic.md). The runtime
# figure above was calibrated on starts whose matrix was at most Llama-3.1-8B's, and holds
# it; a dense model with a larger one gets the difference, per rank as
# VocabParallelEmbedding shards the vocabulary (TP > 1 not measured). Smaller ones keep the
# calibrated figure, and MoE and hybrid models, whose logs do not show this term, are
# unchanged.
CALIBRATED_VOCAB_MATRIX_BYTES = 128_256 * 4096 * 2  # Llama-3.1-8B, bf16


@dataclass(frozen=True)
class Components:
    bytes: dict[str, int]
    notes: dict[str, str]
    weights: WeightSizes | None = None  # where the weight figures came from


def activation_bytes_per_token(m: ModelSpec, tp: int) -> int:
    """Live activation of one prefill token at the profiling peak (per rank).

    Hidden-size buffers for every model; for GDN layers the fp32 chunk states,
    the fp32 q/k/v after the short convolution and the qkvz projection; for Mamba-2 the
    same three (states per `chunk_size` tokens, conv output, in_proj output); for MoE
    the fused-experts intermediate of the routed experts.
    """
    per_token = HIDDEN_BUFFERS * m.hidden_size * m.dtype_bytes
    if m.gdn is not None:
        g = m.gdn
        states = g.num_value_heads * g.key_head_dim * g.value_head_dim * FP32 // GDN_CHUNK
        proj = (2 * g.key_dim + 2 * g.value_dim) * m.dtype_bytes
        per_token += (states + g.conv_dim * FP32 + proj) // tp
    if m.mamba2 is not None:
        s = m.mamba2  # the chunked scan's fp32 states, the conv output, in_proj's output
        states = s.num_heads * s.head_dim * s.state_size * FP32 // s.chunk_size
        proj = (
            2 * s.intermediate_size + 2 * s.n_groups * s.state_size + s.num_heads
        ) * m.dtype_bytes
        per_token += (states + s.conv_dim * FP32 + proj) // tp
    if m.moe is not None:
        fused = m.moe.experts_per_token * 2 * m.moe.expert_intermediate_size * m.dtype_bytes
        per_token += fused // tp
    return per_token


def activation_peak_bytes(m: ModelSpec, s: Settings) -> int:
    tokens = s.max_num_batched_tokens
    sampler = s.max_num_seqs * (1 + s.mtp) * m.vocab_size * 4 * SAMPLER_COPIES // s.tp
    if s.runner == "pooling":  # v1/worker/gpu_model_runner.py: `_dummy_pooler_run`, no sampler
        sampler = 0
    drafter = drafter_activation_bytes(s)
    fixed = vocab_matrix_excess_bytes(m, s.tp)
    return tokens * activation_bytes_per_token(m, s.tp) + sampler + drafter + fixed


def vocab_matrix_excess_bytes(m: ModelSpec, tp: int) -> int:
    """A dense model's fixed profiling peak beyond what the runtime figure holds: its
    vocab × hidden matrix per rank less the calibration models' (0 for MoE and hybrids)."""
    if m.moe is not None or m.gdn is not None or m.mamba2 is not None:
        return 0
    matrix = m.vocab_size * m.hidden_size * m.dtype_bytes // tp
    return max(0, matrix - CALIBRATED_VOCAB_MATRIX_BYTES)


def drafter_activation_bytes(s: Settings) -> int:
    """MTP: the H200-measured figure; an EAGLE/DFlash/draft model runs its own profiling
    pass over the batched tokens (its hidden buffers); n-gram and suffix none."""
    if not s.mtp or s.draft_method in MODEL_FREE_METHODS:
        return 0
    if s.draft is None:
        return MTP_ACTIVATION_BYTES
    return s.max_num_batched_tokens * activation_bytes_per_token(s.draft.spec, s.tp)


def ple_page_cache_bytes(profile: ModelProfile, s: Settings) -> int:
    ple = profile.ple
    if not ple or not s.hardware.uma:
        return 0
    fmt = FORMAT_BYTES_PER_PARAM[str(ple.get("format", "bf16"))]
    return int(int(ple["params"]) * fmt * s.ple_hot_fraction)


def system_reserve_bytes(profile: ModelProfile, s: Settings) -> int:
    if not s.hardware.uma or s.device == "cpu":
        return 0
    if "os_reserve_gib" in profile.reserve:
        return int(float(profile.reserve["os_reserve_gib"]) * GiB)
    return int(s.hardware.memory_bytes * s.hardware.os_reserve_fraction)


def fixed_components(profile: ModelProfile, s: Settings) -> Components:
    m = profile.spec
    weights = weight_sizes(profile, s)
    sizes = dict(weights.bytes)
    notes = dict(weights.notes)
    if s.runner == "pooling":
        # model_executor/models/adapters.py `_create_pooling_model_cls`: the pooling model
        # builds no ParallelLMHead / LogitsProcessor, so an untied lm_head is not loaded.
        sizes.pop("weights.lm_head", None)
    if "draft_vocab_slice" not in sizes:  # else: exact, from the checkpoint's headers
        sizes["draft_vocab_slice"] = s.draft_vocab_rows * m.hidden_size * 2 // s.tp
    sizes["ple_page_cache"] = ple_page_cache_bytes(profile, s)
    notes["ple_page_cache"] = (
        f"estimate: PLE table × hot fraction {s.ple_hot_fraction:g} "
        "(page cache on UMA counts against the same memory)"
    )
    on_gpu = s.device == "cuda"
    sizes["activation_peak"] = activation_peak_bytes(m, s)
    notes["activation_peak"] = (
        f"estimate (H200-calibrated): live activations × {s.max_num_batched_tokens} "
        "batched tokens + sampler logits (+ MTP drafter)"
        if s.runner != "pooling"
        else f"estimate (H200-calibrated): live activations × {s.max_num_batched_tokens} "
        "batched tokens (pooling runner: no sampler logits)"
    )
    if vocab_matrix_excess_bytes(m, s.tp):
        notes["activation_peak"] += " + the vocab matrix's excess over the calibration's"
    decode_tok = activation_bytes_per_token(m, s.tp)
    sizes["cudagraph_pool"] = (
        graph_pool_bytes(s.capture_sizes, s.cudagraph_mode, decode_tok, m.num_layers)
        if on_gpu
        else 0
    )
    notes["cudagraph_pool"] = (
        f"estimate: {len(s.capture_sizes)} graphs ({s.cudagraph_mode}), "
        "largest graph's activations + a fixed cost per graph"
    )
    sizes["runtime"] = (
        (CUDA_RUNTIME_BYTES + (NCCL_BYTES if s.tp * s.pp > 1 else 0)) if on_gpu else 0
    )
    notes["runtime"] = "measured on H200 (1.16–1.52 GiB): CUDA context, workspaces (+ NCCL)"
    sizes["ray"] = RAY_NODE_BYTES if s.nodes > 1 else 0
    notes["ray"] = "assumed: Ray raylet, GCS and object-store floor on each node"
    sizes["system_reserve"] = system_reserve_bytes(profile, s)
    notes["system_reserve"] = "OS, container and driver share of unified memory"
    return Components({k: v for k, v in sizes.items() if v}, notes, weights)
