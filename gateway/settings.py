"""Typed gateway configuration, read from `GATEWAY_*` environment variables.

`GatewaySettings()` validates on construction; `load_settings()` turns pydantic's
errors into one `ConfigError` line that names the variable and what is allowed.
Nothing here touches the network or the disk (key files and the salt secret are
read by `gateway.tenancy` when the app is built).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from gateway.errors import ConfigError

ENV_PREFIX = "GATEWAY_"
MiB = 1024**2
OnOff = Literal["on", "off"]
REMOVED_CLIENTS = ("httptools", "httpx")  # GATEWAY_UPSTREAM_CLIENT values of the past
_RULE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_REPLICA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


# vLLM's paths the embedded gateway passes on to a keyed client by default: read-only,
# no generation (a generation route the gateway does not prepare would run without the
# tenant's cache salt and admission slot: `/v1/messages`, `/v1/chat/completions/batch`, …).
DEFAULT_PASSTHROUGH = ("/v1/models", "/detokenize")


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sparkserve-gateway"


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    return url.rstrip("/")


class GatewaySettings(BaseSettings):
    """Every gateway option; each field is the env var `GATEWAY_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    upstream_url: Annotated[list[str], NoDecode] = Field(
        description="vLLM base URL(s), comma list: one per replica"
    )
    upstream_names: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="replica names for metric labels (default 0, 1, …)"
    )
    routing: Literal["affinity", "round_robin"] = Field(
        "affinity", description="replica choice: prefix affinity or round-robin"
    )
    replica_max_in_flight: int = Field(
        32, ge=1, description="in-flight requests past which affinity spills to the least loaded"
    )
    health_interval_seconds: float = Field(
        2.0, gt=0, description="period of the replicas' /health checks"
    )
    health_timeout_misses: int = Field(
        2,
        ge=1,
        le=100,
        description="/health checks in a row that time out before a replica is marked unhealthy",
    )
    host: str = Field("0.0.0.0", description="address to listen on")
    port: int = Field(8080, ge=1, le=65535, description="port to listen on")
    api_keys: SecretStr = Field(SecretStr(""), description="comma list of `key` or `tenant:key`")
    api_keys_file: Path | None = Field(
        None, description="file with one `key`/`tenant:key` a line (or a comma list)"
    )
    auth: OnOff = Field("on", description="require an API key on /v1 routes and /tokenize")
    layout: OnOff = Field("on", description="prefix-stable rewrite of chat requests")
    control_url: str | None = Field(None, description="entrypoint control URL (/ready, /metrics)")
    upstream_api_key: SecretStr | None = Field(None, description="key sent to vLLM (--api-key)")
    max_body_bytes: int = Field(32 * MiB, ge=1024, description="largest request body accepted")
    max_concurrency: int = Field(256, ge=1, description="requests in flight to vLLM, all keys")
    max_concurrency_per_key: int = Field(64, ge=1, description="requests in flight per API key")
    queue_size: int = Field(512, ge=0, description="requests waiting for a slot before 429")
    queue_timeout_seconds: float = Field(30.0, gt=0, description="longest wait for a slot")
    retry_after_seconds: int = Field(1, ge=0, description="Retry-After sent with 429 and 503")
    connect_timeout_seconds: float = Field(5.0, gt=0, description="connecting to vLLM")
    read_timeout_seconds: float = Field(600.0, gt=0, description="longest silence from vLLM")
    keepalive_seconds: int = Field(
        75, ge=1, description="how long an idle client connection stays open (seconds)"
    )
    salt_secret: SecretStr | None = Field(None, description="server secret for cache salts")
    state_dir: Path = Field(
        default_factory=_default_state_dir, description="where a generated salt secret is kept"
    )
    cache_groups: str = Field("", description="tenants sharing a salt: `group=t1+t2,group2=t3+t4`")
    layout_rules: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description='extra volatile patterns, JSON {"name": "regex"}'
    )
    session_memory: int = Field(4096, ge=1, description="chat sessions remembered for divergence")
    thermal_threshold_celsius: float = Field(85.0, description="GPU temperature that throttles")
    thermal_concurrency_fraction: float = Field(
        0.5, gt=0, le=1, description="share of max_concurrency kept while hot"
    )
    thermal_poll_seconds: float = Field(5.0, gt=0, description="control /metrics poll period")
    upstream_client: Literal["aiohttp"] = Field(
        "aiohttp", description="HTTP client to vLLM for the data plane (aiohttp, the only one)"
    )
    embedded_bypass_token: SecretStr | None = Field(
        None,
        description="embedded mode: requests with this x-sparkserve-bypass header skip the "
        "gateway (the entrypoint's own requests; benchmarks)",
    )
    embedded_passthrough: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_PASSTHROUGH),
        description="embedded mode: vLLM's other paths a keyed client may reach as they are "
        "(no salt, layout or admission slot), comma list; `*` for every path",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: OnOff = Field("off", description="uvicorn access log")

    @field_validator("upstream_url", "upstream_names", "embedded_passthrough", mode="before")
    @classmethod
    def _parse_lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator(
        "api_keys_file",
        "salt_secret",
        "upstream_api_key",
        "embedded_bypass_token",
        "control_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """`VAR=` (as compose writes `${VAR:-}`) means unset, not an empty path (the
        current directory), an empty secret or an empty bypass token."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("embedded_passthrough")
    @classmethod
    def _check_passthrough(cls, value: list[str]) -> list[str]:
        for path in value:
            if path != "*" and (not path.startswith("/") or any(c.isspace() for c in path)):
                raise ValueError(
                    f"{path!r} is neither a path such as /detokenize nor * (every path)"
                )
        return value

    @field_validator("upstream_names")
    @classmethod
    def _check_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _REPLICA_NAME.match(name):
                raise ValueError(f"replica name {name!r} must match {_REPLICA_NAME.pattern}")
        if len(set(value)) != len(value):
            raise ValueError("replica names must be distinct")
        return value

    @model_validator(mode="after")
    def _names_match_urls(self) -> GatewaySettings:
        if self.upstream_names and len(self.upstream_names) != len(self.upstream_url):
            raise ValueError(
                f"GATEWAY_UPSTREAM_NAMES has {len(self.upstream_names)} names for "
                f"{len(self.upstream_url)} GATEWAY_UPSTREAM_URL replicas"
            )
        return self

    @field_validator("upstream_url")
    @classmethod
    def _check_upstreams(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("needs at least one URL such as http://127.0.0.1:8000")
        return [_check_url(url) for url in value]

    @field_validator("upstream_client", mode="before")
    @classmethod
    def _removed_clients(cls, value: Any) -> Any:
        if value in REMOVED_CLIENTS:
            raise ValueError(
                f"{value} is no longer a choice (the gateway's own HTTP/1.1 client and the "
                "httpx data plane were removed); allowed: aiohttp"
            )
        return value

    @field_validator("control_url")
    @classmethod
    def _check_control(cls, value: str | None) -> str | None:
        return _check_url(value) if value else None

    @field_validator("layout_rules", mode="before")
    @classmethod
    def _parse_rules(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f'not JSON like {{"ticket": "TICKET-[0-9]+"}} ({exc})') from None

    @field_validator("layout_rules")
    @classmethod
    def _check_rules(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            if not _RULE_NAME.match(name):
                raise ValueError(f"rule name {name!r} must match {_RULE_NAME.pattern}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"rule {name!r}: bad regex {pattern!r} ({exc})") from None
        return value

    @property
    def upstream(self) -> str:
        """The first replica's URL."""
        return self.upstream_url[0]

    @property
    def replica_names(self) -> list[str]:
        return self.upstream_names or [str(i) for i in range(len(self.upstream_url))]


def _describe(error: Any) -> str:
    if not error["loc"]:  # a check across fields names them itself
        return str(error["msg"]).removeprefix("Value error, ")
    name = ENV_PREFIX + ".".join(str(part) for part in error["loc"][:1]).upper()
    if error["type"] == "missing":
        return f"{name} is required (for example http://127.0.0.1:8000)"
    given = error.get("input")
    shown = (
        "" if isinstance(given, dict) or name.endswith(("KEY", "KEYS", "SECRET")) else f"={given!r}"
    )
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{name}{shown}: {message}"


def load_settings(**overrides: Any) -> GatewaySettings:
    """Read the environment (plus `overrides`); raise one-line `ConfigError`s."""
    try:
        return GatewaySettings(**overrides)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(e) for e in exc.errors())) from None
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
