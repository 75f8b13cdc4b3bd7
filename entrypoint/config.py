"""Every SPARKSERVE_* setting, declared once: env var, flag, type, default, help.

The planner's settings come from `budget.options.SETTINGS` (the same declarations that
make `python -m budget plan`'s options); the entrypoint's own follow.  `python -m
entrypoint --help` is generated from `OPTIONS`; `load_config` reads the environment (a
flag given on the command line wins over its variable) into a frozen `EntrypointConfig`
that the rest of the package is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from budget import parsers
from budget.options import ENV_PREFIX, SETTINGS, PlanOptions, Setting
from entrypoint.cluster_options import cluster_options
from entrypoint.errors import ConfigError
from entrypoint.vllm_flags import flag_name


@dataclass(frozen=True)
class Option:
    """One setting: `SPARKSERVE_<NAME>` in the environment, `--<name>` on the command line."""

    field: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    metavar: str
    secret: bool = False
    planner: bool = False  # a PlanOptions field (EntrypointConfig.plan)

    @classmethod
    def of_setting(cls, setting: Setting) -> Option:
        return cls(
            setting.name,
            setting.parse,
            setting.default,
            setting.help,
            setting.metavar,
            planner=True,
        )

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    def read(self, raw: str | None, source: str) -> Any:
        """The typed value of `raw` (None or empty → the default); errors name `source`."""
        if raw is None or not raw.strip():
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            shown = "<hidden>" if self.secret else repr(raw)
            raise ConfigError(f"{source}={shown}: {exc}") from None


def non_negative_gib(raw: str) -> float:
    """A size in GiB, 0 or more (a plain number: 7.5 means 7.5 GiB)."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a number of GiB >= 0") from None
    if not 0 <= value < float("inf"):  # NaN fails too
        raise ValueError("must be a number of GiB >= 0")
    return value


SERVING_OPTIONS: tuple[Option, ...] = (
    Option(
        "weights",
        parsers.text,
        None,
        "What vLLM loads (--model) when SPARKSERVE_MODEL is a "
        "profile name: a checkpoint directory or HF repo id.",
        "DIR|REPO",
    ),
    Option(
        "load_format",
        parsers.word,
        None,
        "How vLLM loads the weights (vLLM --load-format: auto, safetensors, dummy = random "
        "weights, no files needed, …). Unset: vLLM's default (auto).",
        "FORMAT",
    ),
    Option("host", parsers.text, "0.0.0.0", "Address vLLM's OpenAI server listens on.", "ADDR"),
    Option("port", parsers.port, 8000, "Port of vLLM's OpenAI server.", "PORT"),
    Option(
        "control_port",
        parsers.port,
        8001,
        "Port of the entrypoint's own /ready and /metrics.",
        "PORT",
    ),
    Option(
        "api_key",
        parsers.text,
        None,
        "API key vLLM requires on /v1; given to vLLM as VLLM_API_KEY, not on its command "
        "line (never logged).",
        "KEY",
        secret=True,
    ),
    Option(
        "gateway",
        parsers.choice(("off", "embedded")),
        "off",
        "embedded: serve the sparkserve gateway inside vLLM's API server "
        "(GATEWAY_* settings; docs/gateway.md); off: plain vLLM.",
        "off|embedded",
    ),
    Option(
        "warmup",
        parsers.switch,
        True,
        "Warm up the real request shapes before /ready turns 200.",
        "on|off",
    ),
    Option(
        "vllm_extra_args",
        parsers.argv_words,
        (),
        "More vLLM flags, shell words, appended last (checked against vLLM's parser).",
        "ARGS",
    ),
    Option(
        "force",
        parsers.switch,
        False,
        "Start even when the plan does not fit (or free memory is short of vLLM's start check).",
        "on|off",
    ),
    Option(
        "startup_timeout",
        parsers.positive_seconds,
        1800.0,
        "Seconds from launch until vLLM must answer /health (exit 3 after).",
        "SECONDS",
    ),
    Option(
        "unhealthy_exit_seconds",
        parsers.positive_seconds,
        60.0,
        "Seconds vLLM may fail /health after ready (/ready is 503 meanwhile) before exit 3.",
        "SECONDS",
    ),
    Option(
        "stall_timeout_s",
        parsers.non_negative_seconds,
        120.0,
        "Seconds the engine may make no progress (no token, prefill chunk or finished "
        "request) with requests admitted, or leave a one-token probe unanswered while "
        "idle, before the entrypoint stops vLLM and exits 3; 0 turns the watch off.",
        "SECONDS",
    ),
    Option(
        "stop_grace_seconds",
        parsers.positive_seconds,
        30.0,
        "Seconds between SIGTERM to vLLM and SIGKILL.",
        "SECONDS",
    ),
    Option(
        "memory_floor_gib",
        non_negative_gib,
        None,
        "Available memory (MemAvailable, or the container's memory cgroup where it has a "
        "limit: the smaller) under which the memory watchdog stops admitting work (/ready "
        "503, phase memory_low) and then stops vLLM and exits 4, before unified memory "
        "runs out and the host hangs (docs/entrypoint.md, Memory watchdog); 0 turns it off. "
        "Unset: half the plan's system_reserve (a twentieth of the memory where the plan keeps "
        "none), on unified memory only.",
        "GiB",
    ),
    Option(
        "memory_hold_seconds",
        parsers.non_negative_seconds,
        3.0,
        "Seconds available memory must stay under the floor before work is refused "
        "(one short dip does not trip the watchdog).",
        "SECONDS",
    ),
    Option(
        "memory_drain_seconds",
        parsers.non_negative_seconds,
        10.0,
        "Seconds of refusing work under the floor before vLLM is stopped (exit 4), at "
        "once if memory falls under half the floor; memory back above it reopens.",
        "SECONDS",
    ),
    Option(
        "vllm_nice",
        parsers.nice,
        0,
        "Lower vLLM's CPU priority (its session's too) so that what shares its cores "
        "(gateway, health checks) is not starved by its engine loop; 0 leaves it.",
        "0-19",
    ),
    Option(
        "cache_dir",
        parsers.text,
        None,
        "Directory for vLLM/Triton/inductor compile caches "
        "(a volume, so restarts do not recompile).",
        "DIR",
    ),
)

PLANNER_OPTIONS: tuple[Option, ...] = tuple(Option.of_setting(s) for s in SETTINGS if s.entrypoint)
OPTIONS: tuple[Option, ...] = (*PLANNER_OPTIONS, *SERVING_OPTIONS, *cluster_options(Option))


@dataclass(frozen=True)
class EntrypointConfig:
    """The validated settings; field names are the option names (see OPTIONS), and the
    planner's are in `plan`, as the user gave them (the machine is detected later)."""

    plan: PlanOptions
    weights: str | None
    load_format: str | None
    host: str
    port: int
    control_port: int
    api_key: str | None
    gateway: str
    warmup: bool
    vllm_extra_args: tuple[str, ...]
    force: bool
    startup_timeout: float
    unhealthy_exit_seconds: float
    stall_timeout_s: float
    stop_grace_seconds: float
    memory_floor_gib: float | None
    memory_hold_seconds: float
    memory_drain_seconds: float
    vllm_nice: int
    cache_dir: str | None
    role: str
    head_address: str | None
    ray_port: int
    ray_extra_args: tuple[str, ...]
    node_ip: str | None
    nccl_socket_ifname: str | None
    gloo_socket_ifname: str | None
    nccl_ib_hca: str | None
    nccl_ib_gid_index: int | None
    ray_object_store_memory: int | None
    node_wait_timeout: float


def load_config(
    environ: Mapping[str, str], flags: Mapping[str, str | None] | None = None
) -> EntrypointConfig:
    """Read every option from `flags` (raw strings by field) or else `environ`."""
    flags = flags or {}
    values: dict[str, Any] = {}
    planned: dict[str, Any] = {}
    for option in OPTIONS:
        raw_flag = flags.get(option.field)
        if raw_flag is not None:
            value = option.read(raw_flag, option.flag)
        else:
            value = option.read(environ.get(option.env), option.env)
        (planned if option.planner else values)[option.field] = value
    config = EntrypointConfig(plan=PlanOptions(**planned), **values)
    check_consistency(config)
    check_key_sources(config, environ)
    return config


def check_key_sources(config: EntrypointConfig, environ: Mapping[str, str]) -> None:
    """vLLM takes a key from `--api-key` or VLLM_API_KEY too; one the entrypoint does not
    know would fail its warm-up with a 401 minutes later, after the model has loaded."""
    stray = environ.get("VLLM_API_KEY")
    if stray and stray != config.api_key:
        raise ConfigError(
            "VLLM_API_KEY is set in the entrypoint's environment: vLLM would demand that "
            "key on /v1, and the entrypoint's warm-up would not send it; put the key in "
            "SPARKSERVE_API_KEY (given to vLLM as VLLM_API_KEY) and unset VLLM_API_KEY"
        )
    if any(flag_name(word) == "--api-key" for word in config.vllm_extra_args):
        raise ConfigError(
            "SPARKSERVE_VLLM_EXTRA_ARGS has --api-key: the entrypoint's warm-up would not "
            "send that key, and vLLM's command line would show it to anyone running ps; "
            "put the key in SPARKSERVE_API_KEY instead"
        )


def check_consistency(config: EntrypointConfig) -> None:
    """Combinations no single value can catch."""
    if config.port == config.control_port:
        raise ConfigError(
            f"SPARKSERVE_PORT and SPARKSERVE_CONTROL_PORT are both {config.port}; they must differ"
        )
    if config.gateway == "embedded" and config.api_key:
        raise ConfigError(
            "SPARKSERVE_API_KEY with SPARKSERVE_GATEWAY=embedded: the gateway's keys "
            "(GATEWAY_API_KEYS) guard vLLM then, and vLLM's own key would be demanded on "
            "the same header; unset SPARKSERVE_API_KEY"
        )
    if config.role == "worker" and not config.head_address:
        raise ConfigError(
            "SPARKSERVE_ROLE=worker needs SPARKSERVE_HEAD_ADDRESS (the head's address)"
        )
    if config.role == "single" and (config.plan.nodes or 1) > 1:
        raise ConfigError(
            f"SPARKSERVE_NODES={config.plan.nodes} needs SPARKSERVE_ROLE=head on this node "
            "(and SPARKSERVE_ROLE=worker on the others)"
        )
