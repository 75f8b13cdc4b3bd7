"""Every SPARKSERVE_* setting, declared once: env var, flag, type, default, help.

`EntrypointConfig` is the entrypoint's settings: its serving ones (`serving_options`),
its cluster ones (`cluster_options`) and, in `plan`, the planner's (`PlanOptions`, the
same declarations that make `python -m budget plan`'s options).  Each field's
`budget.options.declare` metadata makes its `Option`; `python -m entrypoint --help` is
generated from `OPTIONS`; `load_config` reads the environment (a flag given on the
command line wins over its variable) into a frozen `EntrypointConfig` that the rest of
the package is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from budget.options import PlanOptions, Setting, settings_of
from entrypoint.cluster_options import ClusterOptions
from entrypoint.errors import ConfigError
from entrypoint.serving_options import ServingOptions
from entrypoint.vllm_flags import flag_name


@dataclass(frozen=True)
class Option(Setting):
    """A declared setting as the entrypoint reads it: `SPARKSERVE_<NAME>` in the
    environment, `--<name>` on the command line."""

    planner: bool = False  # a PlanOptions field (EntrypointConfig.plan)

    @property
    def field(self) -> str:
        return self.name

    def read(self, raw: str | None, source: str) -> Any:
        """The typed value of `raw` (None or empty → the default); errors name `source`."""
        if raw is None or not raw.strip():
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            shown = "<hidden>" if self.secret else repr(raw)
            raise ConfigError(f"{source}={shown}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class EntrypointConfig(ClusterOptions, ServingOptions):
    """The validated settings: the serving ones, then the cluster's (a dataclass takes
    its bases' fields last base first), and the planner's in `plan`, as the user gave
    them (the machine is detected later)."""

    plan: PlanOptions


def _options(owner: type[Any], *, planner: bool) -> tuple[Option, ...]:
    return tuple(Option(**vars(s), planner=planner) for s in settings_of(owner) if s.entrypoint)


OPTIONS: tuple[Option, ...] = (
    *_options(PlanOptions, planner=True),
    *_options(EntrypointConfig, planner=False),
)


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
