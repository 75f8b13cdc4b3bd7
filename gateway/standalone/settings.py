"""The standalone gateway's settings (`python -m gateway`), read from `GATEWAY_*`
environment variables: the shared slice (gateway/edge/settings.py) plus the upstream
replicas, the listener and the data-plane client.  The embedded gateway's own
variables (`GATEWAY_EMBEDDED_*`) are ignored here.

Either `GATEWAY_UPSTREAM_URL` (one model's replicas, the model named by vLLM) or
`GATEWAY_MODELS` (several models, each with its replicas, routed by the request's
`model`; `model_upstreams()` gives both as the same list of `ModelUpstream`s).

`GatewaySettings()` validates on construction; `load_settings()` turns pydantic's
errors into one `ConfigError` line that names the variable and what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from gateway.core.models import MODEL_NAME
from gateway.edge.settings import (
    ENV_PREFIX,
    CommonSettings,
    OnOff,
    check_url,
    empty_is_unset,
    load_as,
    split_list,
)

__all__ = [
    "ENV_PREFIX",
    "REMOVED_CLIENTS",
    "GatewaySettings",
    "ModelUpstream",
    "load_settings",
    "parse_model_map",
]

REMOVED_CLIENTS = ("httptools", "httpx")  # GATEWAY_UPSTREAM_CLIENT values of the past
_REPLICA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


def parse_model_map(value: str, form: str, what: str) -> dict[str, list[str]]:
    """`model=a,b;model2=c` → {model: [a, b], model2: [c]} (`form` shows an entry and
    `what` names the values in errors); model names checked, each named once, each
    with one value at least."""
    parsed: dict[str, list[str]] = {}
    for entry in (part.strip() for part in value.split(";")):
        if not entry:
            continue
        name, sep, rest = entry.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"{entry!r} is not `{form}` (models are separated by `;`)")
        if not MODEL_NAME.match(name):
            raise ValueError(f"model name {name!r} must match {MODEL_NAME.pattern}")
        if name in parsed:
            raise ValueError(f"model {name!r} is named twice")
        values = split_list(rest)
        if not values:
            raise ValueError(f"model {name!r} has no {what}")
        parsed[name] = values
    return parsed


def _check_replica_names(value: list[str]) -> list[str]:
    for name in value:
        if not _REPLICA_NAME.match(name):
            raise ValueError(f"replica name {name!r} must match {_REPLICA_NAME.pattern}")
    if len(set(value)) != len(value):
        raise ValueError("replica names must be distinct")
    return value


@dataclass(frozen=True)
class ModelUpstream:
    """One model's replicas: `name` None is the one model of GATEWAY_UPSTREAM_URL
    (the request's `model` is not looked at); `replica_names` are the metric labels."""

    name: str | None
    urls: list[str]
    replica_names: list[str]
    control_url: str | None


class GatewaySettings(CommonSettings):
    """Every standalone gateway option; each field is the env var `GATEWAY_<NAME>`."""

    upstream_url: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="vLLM base URL(s), comma list: one per replica (required unless "
        "GATEWAY_MODELS is set)",
        json_schema_extra={"required_unless": "models"},
    )
    models: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description="several models behind one endpoint, routed by the request's `model`: "
        "`model=url,url;model2=url` (each model's replicas; not with GATEWAY_UPSTREAM_URL)",
    )
    model_control_urls: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="with GATEWAY_MODELS: a model's own control endpoint (readiness, thermal "
        "guard, memory gate), `model=url;model2=url`; others use GATEWAY_CONTROL_URL",
    )
    model_upstream_names: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description="with GATEWAY_MODELS: a model's replica names, `model=a,b;model2=c` "
        "(default 0, 1, …); the `replica` label is `model/name`",
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
    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="worker processes on the port; above 1 this process holds admission, "
        "replica counts, chat session memory and /metrics for all of them",
    )
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

    @field_validator("models", mode="before")
    @classmethod
    def _parse_models(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        models = parse_model_map(value, "model=url,url", "URL")
        return {name: [check_url(url) for url in urls] for name, urls in models.items()}

    @field_validator("model_control_urls", mode="before")
    @classmethod
    def _parse_model_controls(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        controls: dict[str, str] = {}
        for name, urls in parse_model_map(value, "model=url", "URL").items():
            if len(urls) != 1:
                raise ValueError(f"model {name!r} has {len(urls)} control URLs; one at most")
            controls[name] = check_url(urls[0])
        return controls

    @field_validator("model_upstream_names", mode="before")
    @classmethod
    def _parse_model_names(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        names = parse_model_map(value, "model=name,name", "replica name")
        for replicas in names.values():
            _check_replica_names(replicas)
        return names

    @field_validator("upstream_api_key", mode="before")
    @classmethod
    def _empty_key_is_unset(cls, value: Any) -> Any:
        return empty_is_unset(value)

    @field_validator("upstream_names")
    @classmethod
    def _check_names(cls, value: list[str]) -> list[str]:
        return _check_replica_names(value)

    @model_validator(mode="after")
    def _one_way_to_name_upstreams(self) -> GatewaySettings:
        if self.models and self.upstream_url is not None:
            raise ValueError(
                "GATEWAY_MODELS and GATEWAY_UPSTREAM_URL are both set: set one (GATEWAY_MODELS "
                "names each model's URLs)"
            )
        if self.models and self.upstream_names:
            raise ValueError(
                "GATEWAY_UPSTREAM_NAMES names GATEWAY_UPSTREAM_URL's replicas; with "
                "GATEWAY_MODELS use GATEWAY_MODEL_UPSTREAM_NAMES"
            )
        if not self.models and self.upstream_url is None:
            raise ValueError(
                "GATEWAY_UPSTREAM_URL is required (for example http://127.0.0.1:8000), "
                "or GATEWAY_MODELS for several models"
            )
        for variable, named in (
            ("GATEWAY_MODEL_CONTROL_URLS", self.model_control_urls),
            ("GATEWAY_MODEL_UPSTREAM_NAMES", self.model_upstream_names),
        ):
            unknown = sorted(set(named) - set(self.models))
            if unknown and not self.models:
                raise ValueError(f"{variable} is set without GATEWAY_MODELS")
            if unknown:
                raise ValueError(
                    f"{variable} names {', '.join(map(repr, unknown))}, not in GATEWAY_MODELS "
                    f"({', '.join(self.models)})"
                )
        for name, replicas in self.model_upstream_names.items():
            if len(replicas) != len(self.models[name]):
                raise ValueError(
                    f"GATEWAY_MODEL_UPSTREAM_NAMES has {len(replicas)} names for the "
                    f"{len(self.models[name])} GATEWAY_MODELS replicas of model {name!r}"
                )
        return self

    @model_validator(mode="after")
    def _names_match_urls(self) -> GatewaySettings:
        urls = self.upstream_url or []
        if self.upstream_names and len(self.upstream_names) != len(urls):
            raise ValueError(
                f"GATEWAY_UPSTREAM_NAMES has {len(self.upstream_names)} names for "
                f"{len(urls)} GATEWAY_UPSTREAM_URL replicas"
            )
        return self

    @field_validator("upstream_url")
    @classmethod
    def _check_upstreams(cls, value: list[str] | None) -> list[str] | None:
        if value is None:  # not set: GATEWAY_MODELS names the upstreams, or neither does
            return None
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
        """The first replica's URL (the first model's with GATEWAY_MODELS)."""
        return self.model_upstreams()[0].urls[0]

    def model_upstreams(self) -> list[ModelUpstream]:
        """Each model's replicas: one unnamed model for GATEWAY_UPSTREAM_URL."""
        if not self.models:
            urls = self.upstream_url or []
            return [ModelUpstream(None, urls, self.replica_names, self.control_url)]
        return [
            ModelUpstream(
                name,
                urls,
                [
                    f"{name}/{replica}"
                    for replica in self.model_upstream_names.get(
                        name, [str(i) for i in range(len(urls))]
                    )
                ],
                self.model_control_urls.get(name, self.control_url),
            )
            for name, urls in self.models.items()
        ]

    @property
    def replica_names(self) -> list[str]:
        return self.upstream_names or [str(i) for i in range(len(self.upstream_url or []))]


def load_settings(**overrides: Any) -> GatewaySettings:
    """Read the environment (plus `overrides`); raise one-line `ConfigError`s."""
    return load_as(GatewaySettings, **overrides)
