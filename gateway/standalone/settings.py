"""The standalone gateway's settings (`python -m gateway`), read from `GATEWAY_*`
environment variables: the shared slice (gateway/edge/settings.py) plus the upstream
replicas, the listener and the data-plane client.  The embedded gateway's own
variables (`GATEWAY_EMBEDDED_*`) are ignored here.

`GatewaySettings()` validates on construction; `load_settings()` turns pydantic's
errors into one `ConfigError` line that names the variable and what is allowed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from gateway.edge.settings import (
    ENV_PREFIX,
    CommonSettings,
    OnOff,
    check_url,
    empty_is_unset,
    load_as,
    split_list,
)

__all__ = ["ENV_PREFIX", "REMOVED_CLIENTS", "GatewaySettings", "load_settings"]

REMOVED_CLIENTS = ("httptools", "httpx")  # GATEWAY_UPSTREAM_CLIENT values of the past
_REPLICA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


class GatewaySettings(CommonSettings):
    """Every standalone gateway option; each field is the env var `GATEWAY_<NAME>`."""

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
    upstream_api_key: SecretStr | None = Field(None, description="key sent to vLLM (--api-key)")
    read_timeout_seconds: float = Field(600.0, gt=0, description="longest silence from vLLM")
    keepalive_seconds: int = Field(
        75, ge=1, description="how long an idle client connection stays open (seconds)"
    )
    upstream_client: Literal["aiohttp"] = Field(
        "aiohttp", description="HTTP client to vLLM for the data plane (aiohttp, the only one)"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: OnOff = Field("off", description="uvicorn access log")

    @field_validator("upstream_url", "upstream_names", mode="before")
    @classmethod
    def _parse_lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("upstream_api_key", mode="before")
    @classmethod
    def _empty_key_is_unset(cls, value: Any) -> Any:
        return empty_is_unset(value)

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
        return [check_url(url) for url in value]

    @field_validator("upstream_client", mode="before")
    @classmethod
    def _removed_clients(cls, value: Any) -> Any:
        if value in REMOVED_CLIENTS:
            raise ValueError(
                f"{value} is no longer a choice (the gateway's own HTTP/1.1 client and the "
                "httpx data plane were removed); allowed: aiohttp"
            )
        return value

    @property
    def upstream(self) -> str:
        """The first replica's URL."""
        return self.upstream_url[0]

    @property
    def replica_names(self) -> list[str]:
        return self.upstream_names or [str(i) for i in range(len(self.upstream_url))]


def load_settings(**overrides: Any) -> GatewaySettings:
    """Read the environment (plus `overrides`); raise one-line `ConfigError`s."""
    return load_as(GatewaySettings, **overrides)
