"""Case results and the three renderings of them: a console table, Markdown and JSON.

Pure: nothing here runs a process or reads a clock; `RunMeta` carries the date and
machine the caller measured on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
FAIL = "FAIL"
# A finding that is reported but never fails the run (pip-audit, the Dockerfile user).
WARN = "WARN"
SKIP = "SKIP"
VERDICTS = (PASS, FAIL, WARN, SKIP)
FIGURE_WIDTH = 72


@dataclass(frozen=True)
class CaseResult:
    """One case: its group, name, the figure it measured and its verdict."""

    group: str
    name: str
    figure: str
    verdict: str
    detail: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict={self.verdict!r}; must be one of {', '.join(VERDICTS)}")


def verdict(ok: bool) -> str:
    return PASS if ok else FAIL


@dataclass(frozen=True)
class RunMeta:
    """Where and when the run was measured."""

    date: str
    machine: str
    mode: str
    vllm_version: str
    total_seconds: float


def all_passed(results: Sequence[CaseResult]) -> bool:
    """No case failed (WARN and SKIP are reported, never fatal)."""
    return all(r.verdict != FAIL for r in results)


def counts(results: Sequence[CaseResult]) -> dict[str, int]:
    return {v: sum(1 for r in results if r.verdict == v) for v in VERDICTS}


def summary_line(results: Sequence[CaseResult]) -> str:
    tally = counts(results)
    parts = [f"{tally[v]} {v}" for v in VERDICTS if tally[v]]
    return f"{len(results)} cases: " + ", ".join(parts)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(results: Sequence[CaseResult]) -> str:
    """Fixed-width console table: case, figure, verdict; failures' details below."""
    name_width = max([len(f"{r.group}/{r.name}") for r in results] + [4])
    lines = [f"{'case':<{name_width}}  {'figure':<{FIGURE_WIDTH}}  verdict"]
    lines.append("-" * len(lines[0]))
    for r in results:
        figure = _clip(r.figure, FIGURE_WIDTH)
        lines.append(
            f"{r.group + '/' + r.name:<{name_width}}  {figure:<{FIGURE_WIDTH}}  {r.verdict}"
        )
    notes = [f"  {r.group}/{r.name}: {r.detail}" for r in results if r.detail and r.verdict != PASS]
    if notes:
        lines += ["", "details:", *notes]
    lines += ["", summary_line(results)]
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_markdown(results: Sequence[CaseResult], meta: RunMeta) -> str:
    lines = [
        f"Measured {meta.date} on {meta.machine}; mode `{meta.mode}`, vLLM {meta.vllm_version}, "
        f"{meta.total_seconds:.0f} s in all. {summary_line(results)}.",
        "",
        "| Case | Figure | Verdict |",
        "|---|---|---|",
    ]
    for r in results:
        figure = r.figure if not r.detail or r.verdict == PASS else f"{r.figure} — {r.detail}"
        lines.append(f"| {r.group}/{r.name} | {_md_cell(figure)} | {r.verdict} |")
    return "\n".join(lines) + "\n"


def render_json(results: Sequence[CaseResult], meta: RunMeta) -> str:
    payload = {
        "meta": asdict(meta),
        "passed": all_passed(results),
        "counts": counts(results),
        "cases": [asdict(r) for r in results],
    }
    return json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n"
