"""schemathesis fuzz of the gateway's own OpenAPI, in front of the synthetic vLLM.

Valid and invalid requests (positive and negative generation) for every route,
with a key: no 5xx except the documented upstream ones (502/503/504 with the
upstream error codes), no traceback in any body, every error OpenAI-shaped.
The number of examples is kept small so the whole module runs in well under a
minute.
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from gateway.standalone.app import create_app
from gateway.standalone.openapi import ERROR_STATUSES
from gateway.standalone.settings import GatewaySettings
from tests.gateway.conftest import auth

EXAMPLES_PER_ROUTE = 25
UPSTREAM_CODES = {
    502: "bad_gateway",
    503: "upstream_unavailable",
    504: "upstream_timeout",
}


def _schema() -> schemathesis.BaseSchema:
    """The OpenAPI document of an app that is only built, never served (no I/O)."""
    settings = GatewaySettings(
        upstream_url="http://127.0.0.1:9", auth="off", salt_secret="schema-only"
    )
    loaded = schemathesis.openapi.from_dict(create_app(settings).openapi())
    loaded.config.generation.update(
        modes=list(schemathesis.GenerationMode), max_examples=EXAMPLES_PER_ROUTE
    )
    return loaded


# (schemathesis.pytest.from_fixture fails on pytest 9: 'Function' has no '_nodeid'.)
schema = _schema()


def _assert_openai_error(status: int, text: str) -> None:
    try:
        error = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        pytest.fail(f"{status} without an OpenAI error body: {text[:200]!r}")
    assert {"message", "type", "code"} <= set(error), text[:200]


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_unexpected_5xx_no_traceback_openai_errors(
    case: schemathesis.Case, gateway_url: str
) -> None:
    response = case.call(base_url=gateway_url, headers=auth(), timeout=10)
    status, text = response.status_code, response.text
    assert "Traceback" not in text and 'File "' not in text, text[:300]
    if status >= 500:
        assert status in UPSTREAM_CODES, f"{status} for {case.method} {case.path}: {text[:200]}"
        assert json.loads(text)["error"]["code"] == UPSTREAM_CODES[status]
    if status >= 400:
        _assert_openai_error(status, text)
    if case.path.startswith("/v1") and status >= 400:
        assert str(status) in ERROR_STATUSES or status in (404, 405), status
