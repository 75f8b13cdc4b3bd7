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

from entrypoint.config import EntrypointConfig
from entrypoint.errors import PreflightError

MIDDLEWARE = "gateway.embedded.EmbeddedGateway"
EMBEDDED = "embedded"
BYPASS_ENV = "GATEWAY_EMBEDDED_BYPASS_TOKEN"
BYPASS_HEADER = "x-sparkserve-bypass"  # gateway/embedded.py


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


def check_embedded(config: EntrypointConfig) -> None:
    """Pre-flight of the embedded gateway; `PreflightError` naming the problem."""
    if config.gateway != EMBEDDED:
        return
    try:
        from gateway.embedded import startup_check
        from gateway.errors import ConfigError
    except ImportError as exc:
        raise PreflightError(
            f"SPARKSERVE_GATEWAY=embedded: the gateway cannot be imported here ({exc}); "
            "install sparkserve with its dependencies (pip install -e .)"
        ) from None
    try:
        startup_check()
    except ConfigError as exc:
        raise PreflightError(f"SPARKSERVE_GATEWAY=embedded: {exc.message}") from None
