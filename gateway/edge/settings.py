"""The `GATEWAY_*` settings both faces read: auth and keys, salts, layout, admission,
the control endpoint (thermal guard, memory gate).

`CommonSettings` is the shared slice; the standalone gateway's `GatewaySettings`
(gateway/standalone/settings.py) and the embedded one's `EmbeddedSettings`
(gateway/embedded/settings.py) add their own fields, and each ignores the other's
variables.  `load_as` turns pydantic's errors into one `ConfigError` line that
names the variable and what is allowed.  Nothing here touches the network or reads a
file (key files and the salt secret are read by gateway/edge/secrets.py when the
gateway is built).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from gateway.core.errors import ConfigError

ENV_PREFIX = "GATEWAY_"
MiB = 1024**2
OnOff = Literal["on", "off"]
_RULE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sparkserve-gateway"


def split_list(value: Any) -> Any:
    """A comma list from the environment as a list (a list as it is)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def empty_is_unset(value: Any) -> Any:
    """`VAR=` (as compose writes `${VAR:-}`) means unset, not an empty path (the
    current directory), an empty secret or an empty token."""
    return None if isinstance(value, str) and not value.strip() else value


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    return url.rstrip("/")


class CommonSettings(BaseSettings):
    """The options of both faces; each field is the env var `GATEWAY_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    api_keys: SecretStr = Field(SecretStr(""), description="comma list of `key` or `tenant:key`")
    api_keys_file: Path | None = Field(
        None, description="file with one `key`/`tenant:key` a line (or a comma list)"
    )
    auth: OnOff = Field("on", description="require an API key on /v1 routes and /tokenize")
    layout: OnOff = Field("on", description="prefix-stable rewrite of chat requests")
    control_url: str | None = Field(None, description="entrypoint control URL (/ready, /metrics)")
    max_body_bytes: int = Field(32 * MiB, ge=1024, description="largest request body accepted")
    max_concurrency: int = Field(256, ge=1, description="requests in flight to vLLM, all keys")
    max_concurrency_per_key: int = Field(64, ge=1, description="requests in flight per API key")
    queue_size: int = Field(512, ge=0, description="requests waiting for a slot before 429")
    queue_timeout_seconds: float = Field(30.0, gt=0, description="longest wait for a slot")
    retry_after_seconds: int = Field(1, ge=0, description="Retry-After sent with 429 and 503")
    connect_timeout_seconds: float = Field(5.0, gt=0, description="connecting to vLLM")
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

    @field_validator("api_keys_file", "salt_secret", "control_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return empty_is_unset(value)

    @field_validator("control_url")
    @classmethod
    def _check_control(cls, value: str | None) -> str | None:
        return check_url(value) if value else None

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


Settings = TypeVar("Settings", bound=CommonSettings)


def load_as(kind: type[Settings], **overrides: Any) -> Settings:
    """Read the environment (plus `overrides`) into `kind`; raise one-line `ConfigError`s."""
    try:
        return kind(**overrides)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(e) for e in exc.errors())) from None
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
