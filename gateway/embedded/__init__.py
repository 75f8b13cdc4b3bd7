"""The gateway inside vLLM's API server (`--middleware gateway.embedded.EmbeddedGateway`):
gateway/embedded/middleware.py."""

from gateway.embedded.middleware import (
    BYPASS_HEADER,
    EmbeddedGateway,
    check_one_api_server,
    startup_check,
)
from gateway.embedded.settings import EmbeddedSettings, load_embedded_settings

__all__ = [
    "BYPASS_HEADER",
    "EmbeddedGateway",
    "EmbeddedSettings",
    "check_one_api_server",
    "load_embedded_settings",
    "startup_check",
]
