"""`python -m gateway --help`: usage and every GATEWAY_* setting, from GatewaySettings itself
(name, default, description), with nothing needing to be set."""

from __future__ import annotations

import textwrap

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from gateway.standalone.settings import ENV_PREFIX, GatewaySettings

WIDTH = 100
USAGE = """\
usage: python -m gateway [--help]

An OpenAI-compatible gateway in front of vLLM (or several vLLM replicas): streaming
passthrough, API keys and tenant cache salts, a prefix-stable prompt layout, admission
control and Prometheus metrics on /metrics.  Configured only by environment variables;
GATEWAY_UPSTREAM_URL is required, or GATEWAY_MODELS for several models.
Also: uvicorn gateway.app:create_app --factory.
Exit 2 on bad configuration (one line on stderr); 0 after SIGTERM or SIGINT.

settings (GATEWAY_<NAME>; default in brackets):"""


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if field.is_required() or (isinstance(extra, dict) and "required_unless" in extra):
        return "required"
    if field.default_factory in (list, dict):
        return "unset"  # an empty list or mapping
    if field.default_factory is not None:
        return "computed"
    value = field.get_default()
    if isinstance(value, SecretStr) or value in (None, "", [], {}):
        return "unset"  # a secret's default is never shown
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _entry(name: str, field: FieldInfo) -> str:
    head = f"  {ENV_PREFIX}{name.upper()} [{_default(field)}]"
    body = textwrap.fill(
        str(field.description or ""),
        WIDTH,
        initial_indent="      ",
        subsequent_indent="      ",
    )
    return f"{head}\n{body}"


def usage() -> str:
    fields = GatewaySettings.model_fields
    return "\n".join([USAGE, *(_entry(name, field) for name, field in fields.items())])
