"""The check's report: one Markdown page (report.md, also printed) and one JSON of every
figure (report.json). Pure: built from what the check measured and read."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from budget.plan import Plan
from budget.plan_dict import plan_dict
from entrypoint.gpu_check import first_request
from entrypoint.gpu_check.compare import Figure, all_within, difference, shown
from entrypoint.gpu_check.phases import READY as READY_PHASE
from entrypoint.logscan import CompileCache, Observed

FIRST_REQUEST_TARGET = 1.2  # first ≤ 1.2× steady with warm-up on (docs/gpu-entrypoint.md)
READY = "ready"


@dataclass(frozen=True)
class Outcome:
    """Everything one check found (None where that part did not run)."""

    plan: Plan
    machine: str
    vllm: str  # "vLLM 0.24.0 (installed): KV rules of vLLM 0.24"
    command: str
    state: str  # ready, exited, timeout
    entrypoint_exit: int | None
    observed: Observed
    figures: list[Figure]
    phases: dict[str, float] = field(default_factory=dict)
    printed: dict[str, float] = field(default_factory=dict)
    first: first_request.Run | None = None
    graph_hits: dict[str, Any] | None = None
    warmup: bool = True
    profiled: bool = False  # first and last rounds under vLLM's torch profiler
    last_lines: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.state == READY and all_within(self.figures)


def figure_rows(figures: list[Figure]) -> list[str]:
    rows = ["| figure | planned | vLLM | difference | verdict |", "|---|---|---|---|---|"]
    for f in figures:
        tolerance = "" if not f.tolerance else f" (±{f.tolerance:.0%})"
        rows.append(
            f"| {f.name} | {shown(f.planned, f.unit)} | {shown(f.observed, f.unit)} "
            f"| {difference(f)} | {f.verdict}{tolerance} |"
        )
    return rows


def _startup_rows(outcome: Outcome) -> list[str]:
    if not outcome.phases:
        return ["No start-up phase was logged."]
    rows = ["| phase | seconds |", "|---|---|"]
    rows += [f"| {name} | {seconds:.1f} |" for name, seconds in outcome.phases.items()]
    rows += [f"| printed: {name} | {value:.1f} |" for name, value in outcome.printed.items()]
    return rows


def _first_rows(outcome: Outcome) -> list[str]:
    if outcome.first is None:
        return ["Not measured (vLLM never became ready)."]
    rows = [
        "| shape | first TTFT | steady TTFT | ratio | steady spread "
        "| first gaps | steady gaps | ratio | steady spread |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in first_request.summarise(outcome.first):
        rows.append(
            f"| {s.shape} | {s.first_ttft_seconds * 1000:.1f} ms "
            f"| {s.steady_ttft_seconds * 1000:.1f} ms | {s.ttft_ratio:.2f}x "
            f"| {s.steady_ttft_spread:.2f}x "
            f"| {s.first_gap_seconds * 1000:.2f} ms | {s.steady_gap_seconds * 1000:.2f} ms "
            f"| {s.gap_ratio:.2f}x | {s.steady_gap_spread:.2f}x |"
        )
    steady = len({r.shape for r in outcome.first.rounds})
    rounds = len(outcome.first.rounds) // max(1, steady) - 1
    target = f"target with warm-up on: first ≤ {FIRST_REQUEST_TARGET}× steady"
    rows.append(
        f"\nSteady = the median of {rounds} later rounds; gaps = mean of the first "
        f"{first_request.FIRST_GAPS} inter-token gaps (worst stream); warm-up "
        f"{'on' if outcome.warmup else 'off'} ({target}). Steady spread: the steady rounds' "
        "own worst ratio, each against the median of the others; where it exceeds the "
        "target too, the host moved between rounds and the first round's ratio says "
        "little about the first request (the host's CPUs per round are below)."
    )
    if outcome.profiled:
        rows.append(
            "The first and the last round of each shape ran under vLLM's torch profiler "
            "(traces in `profile/`): their times include its overhead."
        )
    return rows


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f} ms"


def host_rows(run: first_request.Run | None) -> list[str]:
    """Each round's TTFT beside what the host's CPUs did meanwhile
    (entrypoint/gpu_check/host.py)."""
    rounds = [] if run is None else [(r, r.host) for r in run.rounds if r.host is not None]
    if not rounds:
        return ["Not read."]
    rows = [
        "| shape | round | TTFT | wall | server CPU | CPU ÷ wall | forced switches "
        "| busiest process | other CPU | steal | throttled | MHz |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    index: dict[str, int] = {}
    for r, h in rounds:
        n = index[r.shape] = index.get(r.shape, -1) + 1
        mhz = "–" if h.cpu_mhz is None else f"{h.cpu_mhz:.0f}"
        busiest = max(h.by_process.items(), key=lambda item: item[1], default=None)
        top = "–" if busiest is None else f"`{busiest[0]}` {_ms(busiest[1])}"
        rows.append(
            f"| {r.shape} | {'first' if n == 0 else n} | {_ms(r.ttft_seconds)} "
            f"| {_ms(h.wall_seconds)} | {_ms(h.server_cpu_seconds)} "
            f"| {h.server_cpu_seconds / h.wall_seconds:.2f} | {h.forced_switches} | {top} "
            f"| {_ms(h.other_cpu_seconds)} | {_ms(h.steal_seconds)} "
            f"| {_ms(h.throttled_seconds)} | {mhz} |"
        )
    rows.append(
        "\nServer CPU: user + system time of the entrypoint, vLLM's API server and engine "
        "during the round (by CUDA's default an engine spins while it waits for the GPU, "
        "so its CPU time holds those waits too and CPU ÷ wall near 1 does not mean the host "
        "was the bottleneck); forced switches: their involuntary context switches; other CPU: "
        "the rest of the machine's busy time, this check's own left out; steal: time a "
        "hypervisor gave our CPUs to another guest; throttled: the cgroup's CPU quota "
        "(– where not accounted)."
    )
    return rows


def _graph_rows(hits: dict[str, Any] | None) -> list[str]:
    if hits is None:
        return ["Not read (vLLM never became ready)."]
    if not hits.get("reported"):
        return [f"vLLM reported no CUDA-graph stats: {hits.get('note')}."]
    rows = [
        f"{hits['note']}.",
        "",
        "| decode width (1+K)×S | predicted | vLLM ran | FULL steps | other steps |",
        "|---|---|---|---|---|",
    ]
    for w in hits["widths"]:
        padded = f", padded to {w['padded_to']}" if w["padded_to"] else ""
        rows.append(
            f"| {w['width']} | {w['predicted']} | {w['reported']}{padded} "
            f"| {w['full_steps']} | {w['fallback_steps']} |"
        )
    return rows


COMPILE_CACHE: dict[CompileCache | None, str] = {
    None: "not logged",
    "compiled": "cold: vLLM compiled its graphs (the start the plan sizes)",
    "loaded": (
        "warm: vLLM loaded its compiled graphs, which leaves more for KV than a cold start "
        '(docs/kv-arithmetic.md, "The plan sizes a cold start")'
    ),
}


def _header(outcome: Outcome) -> list[str]:
    plan = outcome.plan
    verdict = "PASS" if outcome.passed else "FAIL"
    code = "" if outcome.entrypoint_exit is None else f", entrypoint exit {outcome.entrypoint_exit}"
    ready = outcome.phases.get(READY_PHASE)
    reached = f"ready after {ready:.1f} s" if outcome.state == READY and ready else outcome.state
    return [
        f"# GPU check: {plan.model_name} — {verdict}",
        "",
        f"- machine: {outcome.machine}",
        f"- {outcome.vllm}",
        f"- start: {reached}{code}",
        f"- compile cache: {COMPILE_CACHE[outcome.observed.compile_cache]}",
        f"- command: `{outcome.command}`",
    ]


def render(outcome: Outcome) -> str:
    parts = [
        *_header(outcome),
        "",
        "## The plan against vLLM's log",
        "",
        *figure_rows(outcome.figures),
        "",
        "## Start-up (seconds from launch; the planner makes no time estimate)",
        "",
        *_startup_rows(outcome),
        "",
        "## First request against steady state",
        "",
        *_first_rows(outcome),
        "",
        "## The host's CPUs in each round",
        "",
        *host_rows(outcome.first),
        "",
        "## CUDA graphs (vLLM's --cudagraph-metrics)",
        "",
        *_graph_rows(outcome.graph_hits),
    ]
    if outcome.state != READY and outcome.last_lines:
        parts += ["", "## vLLM's last lines", "", "```text", *outcome.last_lines, "```"]
    if outcome.files:
        parts += ["", "Files: " + ", ".join(f"`{name}`" for name in outcome.files)]
    return "\n".join(parts) + "\n"


def figure_json(f: Figure) -> dict[str, Any]:
    return {**asdict(f), "relative": f.relative, "verdict": f.verdict}


def to_json(outcome: Outcome) -> str:
    first = outcome.first
    data = {
        "passed": outcome.passed,
        "state": outcome.state,
        "entrypoint_exit": outcome.entrypoint_exit,
        "machine": outcome.machine,
        "vllm": outcome.vllm,
        "command": outcome.command,
        "figures": [figure_json(f) for f in outcome.figures],
        "observed": asdict(outcome.observed),
        "startup_phases_seconds": outcome.phases,
        "printed_seconds": outcome.printed,
        "warmup": outcome.warmup,
        "profiled": outcome.profiled,
        "first_request": None if first is None else asdict(first),
        "first_request_summary": []
        if first is None
        else [
            {**asdict(s), "ttft_ratio": s.ttft_ratio, "gap_ratio": s.gap_ratio}
            for s in first_request.summarise(first)
        ],
        "graph_hits": outcome.graph_hits,
        "plan": plan_dict(outcome.plan),
        "files": outcome.files,
    }
    return json.dumps(data, indent=1) + "\n"
