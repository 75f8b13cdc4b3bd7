"""The standalone gateway's settings (gateway/standalone/settings.py), kept at this name."""

from gateway.standalone.settings import ENV_PREFIX, GatewaySettings, load_settings

__all__ = ["ENV_PREFIX", "GatewaySettings", "load_settings"]
