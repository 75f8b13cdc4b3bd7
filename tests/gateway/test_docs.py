"""docs/gateway.md names every GATEWAY_* setting and every gateway metric (no drift)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from gateway.core.metrics import GatewayMetrics
from gateway.embedded.settings import EmbeddedSettings
from gateway.standalone.settings import GatewaySettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def test_every_setting_is_documented() -> None:
    text = DOC.read_text()
    missing = [
        f"GATEWAY_{n.upper()}"
        for n in GatewaySettings.model_fields | EmbeddedSettings.model_fields
        if f"`GATEWAY_{n.upper()}`" not in text
    ]
    assert missing == []


def test_every_metric_is_documented() -> None:
    registry = CollectorRegistry()
    GatewayMetrics.create(registry)
    text = DOC.read_text()
    names = {m.name + ("_total" if m.type == "counter" else "") for m in registry.collect()}
    assert sorted(n for n in names if f"`{n}`" not in text) == []


def test_every_gateway_path_the_docs_name_exists() -> None:
    """The docs and the README name gateway files by path; each must be there."""
    root = DOC.parents[1]
    named = {
        (page.name, match)
        for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        for match in re.findall(r"(?<![\w/])gateway/[\w/]+\.py", page.read_text())
    }
    assert named and sorted(n for n in named if not (root / n[1]).exists()) == []
