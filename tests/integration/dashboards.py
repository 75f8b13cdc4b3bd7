"""Read the Grafana dashboards in grafana/dashboards/: panels, PromQL, metric names.

Panels whose description starts with GPU_ONLY_PREFIX read NVML series, which exist
only where the entrypoint sees a GPU; the live test skips them on CPU with that reason.
Panels whose description starts with GENERATION_PREFIX show generated tokens, which a
pooling (embedding) model never produces: they stay empty for it by design.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
GPU_ONLY_PREFIX = "[GPU only]"
GENERATION_PREFIX = "[Generating models]"
DATASOURCE_VAR = "DS_PROMETHEUS"
MODEL_VAR = "$model_name"
RATE_INTERVAL = "$__rate_interval"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = frozenset(
    "by without on ignoring group_left group_right and or unless bool offset inf nan".split()
)


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    expr: str
    gpu_only: bool
    generation_only: bool = False

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref}"

    def substituted(self, model_name: str, rate_interval: str) -> str:
        return self.expr.replace(MODEL_VAR, model_name).replace(RATE_INTERVAL, rate_interval)


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def _marked(panel: dict[str, Any], prefix: str) -> bool:
    return str(panel.get("description", "")).startswith(prefix)


def is_gpu_only(panel: dict[str, Any]) -> bool:
    return _marked(panel, GPU_ONLY_PREFIX)


def is_generation_only(panel: dict[str, Any]) -> bool:
    return _marked(panel, GENERATION_PREFIX)


def queries(path: Path) -> list[Query]:
    dashboard = load(path)
    return [
        Query(
            path.stem,
            panel["title"],
            target["refId"],
            target["expr"],
            is_gpu_only(panel),
            is_generation_only(panel),
        )
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]


def all_queries() -> list[Query]:
    return [query for path in dashboard_files() for query in queries(path)]


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {var["name"]: var for var in dashboard.get("templating", {}).get("list", [])}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (not functions, keywords or label names)."""
    text = _GROUPING.sub(" ", _RANGE.sub(" ", _MATCHERS.sub(" ", _STRING.sub('""', expr))))
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names
