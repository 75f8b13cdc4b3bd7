"""Checks before launch; each failure is one line and an exit code (DESIGN §2).

Model directory readable; weights known for a profile; the plan fits; on unified
memory, MemAvailable covers what vLLM will request; a GPU is visible when the
plan runs on cuda. (The vLLM flag check is in vllm_flags.py: it imports vLLM.)
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

from budget.errors import BudgetError
from budget.model import text_config
from budget.plan import Plan
from budget.safetensors_headers import read_checkpoint
from budget.units import GiB
from draftvocab.plugin import (
    DRAFT_VOCAB_ARCHITECTURES,
    SERVED_DRAFTERS,
    TARGET_DRAFTERS,
    UnsupportedVLLMError,
    check_version,
)
from entrypoint.config import EntrypointConfig
from entrypoint.console import Console
from entrypoint.errors import DoesNotFitError, PreflightError
from entrypoint.hardware import HostMemory, Machine
from entrypoint.vllm_flags import flag_value

DROP_CACHES_HINT = (
    "page cache from model files may hold that memory: on the host run "
    "`sync; echo 3 > /proc/sys/vm/drop_caches` (vLLM #48140)"
)
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
    when the plugin's drafter for this model has never been served by a real vLLM."""
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
    try:  # the vLLM the plan is for: the installed one unless SPARKSERVE_VLLM_VERSION says
        check_version(plan.settings.vllm.version)
    except UnsupportedVLLMError as exc:
        raise PreflightError(str(exc)) from None
    if directory is not None and Path(directory).is_dir() and found != rows:
        raise PreflightError(
            f"SPARKSERVE_DRAFT_VOCAB plans {rows} draft rows, but {directory}/config.json has "
            f"draft_vocab_size={found}: make the reduced head with python -m draftvocab"
        )
    drafter = TARGET_DRAFTERS[plan.model.architecture]
    if drafter in SERVED_DRAFTERS:
        return None
    return (
        f"warning: the draft-vocab plugin's {drafter} drafter has never been served by a "
        "real vLLM, only checked without a load (docs/draft-vocab.md): compare its first "
        "answers with SPARKSERVE_DRAFT_VOCAB=off"
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


def check_fits(plan: Plan, force: bool, console: Console) -> None:
    if (problem := fit_problem(plan)) is None:
        return
    if not force:
        raise DoesNotFitError(problem + " (SPARKSERVE_FORCE=on starts anyway)")
    console.say(f"warning: {problem}; starting anyway (SPARKSERVE_FORCE=on)")


def vllm_request_bytes(plan: Plan) -> int:
    """What vLLM will take from memory: the fraction it requests, or the planned parts."""
    if plan.kv_mode == "utilization" and plan.gpu_memory_utilization is not None:
        return math.ceil(plan.settings.hardware.memory_bytes * plan.gpu_memory_utilization)
    return sum(v for k, v in plan.components.items() if k not in NOT_VLLM_ALLOCATED)


def check_host_memory(plan: Plan, host: HostMemory, force: bool, console: Console) -> None:
    """On unified memory (GB10, CPU) vLLM's free memory is MemAvailable (DESIGN §3)."""
    if not plan.settings.hardware.uma:
        return
    wanted = vllm_request_bytes(plan)
    if host.available_bytes >= wanted:
        return
    problem = (
        f"MemAvailable {host.available_bytes / GiB:.2f} GiB < {wanted / GiB:.2f} GiB "
        f"that vLLM will request; {DROP_CACHES_HINT}"
    )
    if not force:
        raise DoesNotFitError(problem)
    console.say(f"warning: {problem}; starting anyway (SPARKSERVE_FORCE=on)")


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
    check_host_memory(plan, machine.host, config.force, console)
    check_gpu(plan, machine)
    check_port_free(config.host, config.port, "SPARKSERVE_PORT")
