"""The embedded gateway's settings (`--middleware gateway.embedded.EmbeddedGateway`),
read from `GATEWAY_*` environment variables: the shared slice
(gateway/edge/settings.py) plus the bypass token and the passthrough paths.  There is
no upstream to name: the standalone gateway's variables about the upstream
connection, replicas, host and port are ignored (vLLM's own flags set the listener),
but for `GATEWAY_MODELS`, which is refused: several models need the standalone gateway.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from gateway.core.errors import ConfigError
from gateway.edge.settings import CommonSettings, empty_is_unset, load_as, split_list

# vLLM's paths the embedded gateway passes on to a keyed client by default: read-only,
# no generation (a generation route the gateway does not prepare would run without the
# tenant's cache salt and admission slot: `/v1/messages`, `/v1/chat/completions/batch`, …).
DEFAULT_PASSTHROUGH = ("/v1/models", "/detokenize")


class EmbeddedSettings(CommonSettings):
    """Every embedded gateway option; each field is the env var `GATEWAY_<NAME>`."""

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

    @field_validator("embedded_passthrough", mode="before")
    @classmethod
    def _parse_lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("embedded_bypass_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: Any) -> Any:
        return empty_is_unset(value)

    @field_validator("embedded_passthrough")
    @classmethod
    def _check_passthrough(cls, value: list[str]) -> list[str]:
        for path in value:
            if path != "*" and (not path.startswith("/") or any(c.isspace() for c in path)):
                raise ValueError(
                    f"{path!r} is neither a path such as /detokenize nor * (every path)"
                )
        return value


def load_embedded_settings(**overrides: Any) -> EmbeddedSettings:
    """The embedded gateway's `GATEWAY_*` settings (plus `overrides`); one-line
    `ConfigError` if bad.  `GATEWAY_MODELS` (the standalone gateway's several models) is
    refused: the embedded gateway serves only the model of the vLLM it runs in."""
    if os.environ.get("GATEWAY_MODELS", "").strip():
        raise ConfigError(
            "GATEWAY_MODELS is set: the embedded gateway serves only the model of the vLLM it "
            "runs in; unset it, or serve several models with python -m gateway"
        )
    return load_as(EmbeddedSettings, **overrides)
