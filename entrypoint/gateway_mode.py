"""`SPARKSERVE_GATEWAY=embedded`: the sparkserve gateway inside vLLM's API server.

The entrypoint adds `--middleware gateway.embedded.EmbeddedGateway` to vLLM's flags
and runs in pre-flight what vLLM's process will run with the `GATEWAY_*` settings at
start, so a bad one fails before a model is loaded, with the gateway's one-line
reason.  Its own health checks and warm-up go round the gateway with a bypass token
made for this start (`GATEWAY_EMBEDDED_BYPASS_TOKEN`, 32 random bytes, never shown):
the warm-up is not a tenant's traffic, must reach vLLM's full batch whatever the
per-key limits, and must not count in the tenants' metrics (docs/gateway.md,
"Embedded in vLLM").
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from entrypoint.config import EntrypointConfig
from entrypoint.errors import PreflightError
from entrypoint.vllm_flags import flag_name

MIDDLEWARE = "gateway.embedded.EmbeddedGateway"
EMBEDDED = "embedded"
BYPASS_ENV = "GATEWAY_EMBEDDED_BYPASS_TOKEN"
BYPASS_HEADER = "x-sparkserve-bypass"  # gateway/embedded/middleware.py
# vLLM's flags (and their short forms) that start more than one API server process.
API_SERVER_COUNT = ("--api-server-count", "-asc")
DATA_PARALLEL_SIZE = ("--data-parallel-size", "-dp")
CONFIG = ("--config",)  # a YAML file of vLLM flags (vllm/utils/argparse_utils.py)


def bypass_env(config: EntrypointConfig) -> dict[str, str]:
    """vLLM's environment for the gateway mode: a fresh bypass token (none when off)."""
    return {BYPASS_ENV: secrets.token_urlsafe(32)} if config.gateway == EMBEDDED else {}


def bypass_headers(launch_env: dict[str, str]) -> dict[str, str]:
    """The header that takes the entrypoint's own requests round the gateway."""
    token = launch_env.get(BYPASS_ENV)
    return {BYPASS_HEADER: token} if token else {}


def middleware_args(config: EntrypointConfig) -> list[str]:
    """vLLM flags for the gateway mode (none when it is off)."""
    return ["--middleware", MIDDLEWARE] if config.gateway == EMBEDDED else []


def _last_value(args: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of `names` in `args` (`--flag V`, `--flag=V`, `--fl_ag`),
    as vLLM's parser takes it; None when absent.  (Abbreviations never get this far:
    pre-flight refuses a flag vLLM does not know by its full name.)"""
    value = None
    for index, word in enumerate(args):
        name = flag_name(word)
        equals, attached = "=" in word, word.partition("=")[2]
        if name in names:
            value = attached if equals else (args[index + 1] if index + 1 < len(args) else "")
    return value


def api_servers_problem(extra_args: Sequence[str]) -> str | None:
    """Why `extra_args` would make vLLM serve from several API server processes (the
    embedded gateway's admission and metrics are per process), or None."""
    servers = _last_value(extra_args, API_SERVER_COUNT)
    if servers is not None:
        if servers.strip() == "1":
            return None
        return f"{API_SERVER_COUNT[0]} {servers}"
    data_parallel = _last_value(extra_args, DATA_PARALLEL_SIZE)
    if data_parallel is not None and data_parallel.strip() not in ("", "1"):
        return (
            f"{DATA_PARALLEL_SIZE[0]} {data_parallel}, which starts that many API servers "
            f"unless {API_SERVER_COUNT[0]} 1 is given too"
        )
    return None


def config_file_flags(path: str) -> list[str]:
    """The flags with one value each in vLLM's `--config` YAML file, as vLLM's parser
    turns its keys into flags (`api-server-count: 2` → `--api-server-count 2`); the
    others (switches, lists, nested settings) decide no API server count.
    `PreflightError` when the file cannot be read as such."""
    flags: list[str] = []
    for key, value in _config_file(path).items():
        if value is not None and not isinstance(value, bool | list | dict):
            flags += [f"--{key}", str(value)]
    return flags


def check_key_in_config_file(extra_args: Sequence[str]) -> None:
    """vLLM takes `api-key` from its `--config` file too (as a string or a list); the
    warm-up would not send it, and the start would fail with a 401 after the model
    loaded.  `PreflightError` naming the file."""
    path = _last_value(extra_args, CONFIG)
    if not path:
        return
    if any(str(key).replace("_", "-") == "api-key" for key in _config_file(path)):
        raise PreflightError(
            f"SPARKSERVE_VLLM_EXTRA_ARGS --config {path} sets api-key: vLLM would demand "
            "that key on /v1 and the entrypoint's warm-up would not send it; take it out of "
            "the file and put it in SPARKSERVE_API_KEY (given to vLLM as VLLM_API_KEY)"
        )


def _config_file(path: str) -> dict[object, object]:
    """vLLM's `--config` YAML file as a mapping ({} where PyYAML is absent: no vLLM here,
    and its own start reads the file); `PreflightError` when it cannot be read as one."""
    try:
        import yaml  # type: ignore[import-untyped]  # no stubs installed
    except ImportError:
        return {}
    where = f"SPARKSERVE_VLLM_EXTRA_ARGS --config {path}"
    try:
        with open(path, encoding="utf-8") as file:
            loaded = yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise PreflightError(f"{where}: cannot read it as YAML ({reason})") from None
    if not isinstance(loaded, dict):
        raise PreflightError(
            f"{where}: expected a mapping of vLLM flags to values (e.g. "
            f"'max-num-seqs: 64'), got {type(loaded).__name__}"
        )
    return loaded


def as_vllm_reads(extra_args: Sequence[str]) -> list[str]:
    """`extra_args` with the flags of their `--config` file first, where vLLM's parser
    puts them (so the command line wins over the file)."""
    path = _last_value(extra_args, CONFIG)
    return [*config_file_flags(path), *extra_args] if path else list(extra_args)


def check_embedded(config: EntrypointConfig) -> None:
    """Pre-flight of the embedded gateway; `PreflightError` naming the problem."""
    if config.gateway != EMBEDDED:
        return
    problem = api_servers_problem(as_vllm_reads(config.vllm_extra_args))
    if problem is not None:
        where = "SPARKSERVE_VLLM_EXTRA_ARGS"
        if api_servers_problem(config.vllm_extra_args) is None:
            where += f" (its --config {_last_value(config.vllm_extra_args, CONFIG)})"
        raise PreflightError(
            f"SPARKSERVE_GATEWAY=embedded: {where} has {problem}, and the "
            "embedded gateway needs one API server process (each would count its own "
            "admission limits, and vLLM's /metrics would not show the gateway's "
            f"histograms); add {API_SERVER_COUNT[0]} 1, or use the standalone gateway "
            "(SPARKSERVE_GATEWAY=off, python -m gateway in front)"
        )
    try:
        from gateway.core.errors import ConfigError
        from gateway.embedded import startup_check
    except ImportError as exc:
        raise PreflightError(
            f"SPARKSERVE_GATEWAY=embedded: the gateway cannot be imported here ({exc}); "
            "install sparkserve with its dependencies (pip install -e .)"
        ) from None
    try:
        startup_check()
    except ConfigError as exc:
        raise PreflightError(f"SPARKSERVE_GATEWAY=embedded: {exc.message}") from None
