"""Read values from Prometheus' text exposition format (vLLM's and the gateway's /metrics)."""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample named exactly `name`, with its labels."""
    found = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        found.append((labels, float(match["value"])))
    return found


def total(text: str, name: str, **labels: str) -> float:
    """The sum of `name` over the samples whose labels include `labels`; nan when absent."""
    values = [
        value
        for sample_labels, value in samples(text, name)
        if all(sample_labels.get(k) == v for k, v in labels.items())
    ]
    return math.fsum(values) if values else math.nan
